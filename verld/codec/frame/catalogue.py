"""The CRC RevEng catalogue's CRCs whose width is whole bytes: each model's parameters.

The table is data, copied from Greg Cook's "Catalogue of parametrised CRC algorithms"
(reveng.sourceforge.io/crc-catalogue), the names and parameters as published there:
width, poly, init, refin, refout, xorout, and the check value (the CRC of the ASCII
bytes "123456789"), which tests/test_codec_frame.py verifies for every name through
each path that computes it. `ALIASES` maps the catalogue's other names for a model to
its own. Widths that are not whole bytes (CRC-5/USB, CRC-12/UMTS, ...) are left out:
a frame's check field is whole bytes.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

__all__ = ["ALIASES", "MODELS", "Model"]


class Model(NamedTuple):
    """One catalogue entry (its parameters in the catalogue's own terms)."""

    width: int  #: bits: 8, 16, 24, 32, 40 or 64
    poly: int  #: the generator polynomial, top bit implied (normal form)
    init: int  #: the register's value before the first byte
    refin: bool  #: each input byte is taken least significant bit first
    refout: bool  #: the register is reflected before `xorout`
    xorout: int  #: XORed into the result
    check: int  #: the CRC of b"123456789"


_Model = Model
#: catalogue name → parameters
MODELS = MappingProxyType(
    {
        "CRC-8/AUTOSAR": _Model(8, 0x2F, 0xFF, False, False, 0xFF, 0xDF),
        "CRC-8/BLUETOOTH": _Model(8, 0xA7, 0x0, True, True, 0x0, 0x26),
        "CRC-8/CDMA2000": _Model(8, 0x9B, 0xFF, False, False, 0x0, 0xDA),
        "CRC-8/DARC": _Model(8, 0x39, 0x0, True, True, 0x0, 0x15),
        "CRC-8/DVB-S2": _Model(8, 0xD5, 0x0, False, False, 0x0, 0xBC),
        "CRC-8/GSM-A": _Model(8, 0x1D, 0x0, False, False, 0x0, 0x37),
        "CRC-8/GSM-B": _Model(8, 0x49, 0x0, False, False, 0xFF, 0x94),
        "CRC-8/HITAG": _Model(8, 0x1D, 0xFF, False, False, 0x0, 0xB4),
        "CRC-8/I-432-1": _Model(8, 0x7, 0x0, False, False, 0x55, 0xA1),
        "CRC-8/I-CODE": _Model(8, 0x1D, 0xFD, False, False, 0x0, 0x7E),
        "CRC-8/LTE": _Model(8, 0x9B, 0x0, False, False, 0x0, 0xEA),
        "CRC-8/MAXIM-DOW": _Model(8, 0x31, 0x0, True, True, 0x0, 0xA1),
        "CRC-8/MIFARE-MAD": _Model(8, 0x1D, 0xC7, False, False, 0x0, 0x99),
        "CRC-8/NRSC-5": _Model(8, 0x31, 0xFF, False, False, 0x0, 0xF7),
        "CRC-8/OPENSAFETY": _Model(8, 0x2F, 0x0, False, False, 0x0, 0x3E),
        "CRC-8/ROHC": _Model(8, 0x7, 0xFF, True, True, 0x0, 0xD0),
        "CRC-8/SAE-J1850": _Model(8, 0x1D, 0xFF, False, False, 0xFF, 0x4B),
        "CRC-8/SMBUS": _Model(8, 0x7, 0x0, False, False, 0x0, 0xF4),
        "CRC-8/TECH-3250": _Model(8, 0x1D, 0xFF, True, True, 0x0, 0x97),
        "CRC-8/WCDMA": _Model(8, 0x9B, 0x0, True, True, 0x0, 0x25),
        "CRC-16/ARC": _Model(16, 0x8005, 0x0, True, True, 0x0, 0xBB3D),
        "CRC-16/CDMA2000": _Model(16, 0xC867, 0xFFFF, False, False, 0x0, 0x4C06),
        "CRC-16/CMS": _Model(16, 0x8005, 0xFFFF, False, False, 0x0, 0xAEE7),
        "CRC-16/DDS-110": _Model(16, 0x8005, 0x800D, False, False, 0x0, 0x9ECF),
        "CRC-16/DECT-R": _Model(16, 0x589, 0x0, False, False, 0x1, 0x7E),
        "CRC-16/DECT-X": _Model(16, 0x589, 0x0, False, False, 0x0, 0x7F),
        "CRC-16/DNP": _Model(16, 0x3D65, 0x0, True, True, 0xFFFF, 0xEA82),
        "CRC-16/EN-13757": _Model(16, 0x3D65, 0x0, False, False, 0xFFFF, 0xC2B7),
        "CRC-16/GENIBUS": _Model(16, 0x1021, 0xFFFF, False, False, 0xFFFF, 0xD64E),
        "CRC-16/GSM": _Model(16, 0x1021, 0x0, False, False, 0xFFFF, 0xCE3C),
        "CRC-16/IBM-3740": _Model(16, 0x1021, 0xFFFF, False, False, 0x0, 0x29B1),
        "CRC-16/IBM-SDLC": _Model(16, 0x1021, 0xFFFF, True, True, 0xFFFF, 0x906E),
        "CRC-16/ISO-IEC-14443-3-A": _Model(16, 0x1021, 0xC6C6, True, True, 0x0, 0xBF05),
        "CRC-16/KERMIT": _Model(16, 0x1021, 0x0, True, True, 0x0, 0x2189),
        "CRC-16/LJ1200": _Model(16, 0x6F63, 0x0, False, False, 0x0, 0xBDF4),
        "CRC-16/M17": _Model(16, 0x5935, 0xFFFF, False, False, 0x0, 0x772B),
        "CRC-16/MAXIM-DOW": _Model(16, 0x8005, 0x0, True, True, 0xFFFF, 0x44C2),
        "CRC-16/MCRF4XX": _Model(16, 0x1021, 0xFFFF, True, True, 0x0, 0x6F91),
        "CRC-16/MODBUS": _Model(16, 0x8005, 0xFFFF, True, True, 0x0, 0x4B37),
        "CRC-16/NRSC-5": _Model(16, 0x80B, 0xFFFF, True, True, 0x0, 0xA066),
        "CRC-16/OPENSAFETY-A": _Model(16, 0x5935, 0x0, False, False, 0x0, 0x5D38),
        "CRC-16/OPENSAFETY-B": _Model(16, 0x755B, 0x0, False, False, 0x0, 0x20FE),
        "CRC-16/PROFIBUS": _Model(16, 0x1DCF, 0xFFFF, False, False, 0xFFFF, 0xA819),
        "CRC-16/RIELLO": _Model(16, 0x1021, 0xB2AA, True, True, 0x0, 0x63D0),
        "CRC-16/SPI-FUJITSU": _Model(16, 0x1021, 0x1D0F, False, False, 0x0, 0xE5CC),
        "CRC-16/T10-DIF": _Model(16, 0x8BB7, 0x0, False, False, 0x0, 0xD0DB),
        "CRC-16/TELEDISK": _Model(16, 0xA097, 0x0, False, False, 0x0, 0xFB3),
        "CRC-16/TMS37157": _Model(16, 0x1021, 0x89EC, True, True, 0x0, 0x26B1),
        "CRC-16/UMTS": _Model(16, 0x8005, 0x0, False, False, 0x0, 0xFEE8),
        "CRC-16/USB": _Model(16, 0x8005, 0xFFFF, True, True, 0xFFFF, 0xB4C8),
        "CRC-16/XMODEM": _Model(16, 0x1021, 0x0, False, False, 0x0, 0x31C3),
        "CRC-24/BLE": _Model(24, 0x65B, 0x555555, True, True, 0x0, 0xC25A56),
        "CRC-24/FLEXRAY-A": _Model(24, 0x5D6DCB, 0xFEDCBA, False, False, 0x0, 0x7979BD),
        "CRC-24/FLEXRAY-B": _Model(24, 0x5D6DCB, 0xABCDEF, False, False, 0x0, 0x1F23B8),
        "CRC-24/INTERLAKEN": _Model(24, 0x328B63, 0xFFFFFF, False, False, 0xFFFFFF, 0xB4F3E6),
        "CRC-24/LTE-A": _Model(24, 0x864CFB, 0x0, False, False, 0x0, 0xCDE703),
        "CRC-24/LTE-B": _Model(24, 0x800063, 0x0, False, False, 0x0, 0x23EF52),
        "CRC-24/OPENPGP": _Model(24, 0x864CFB, 0xB704CE, False, False, 0x0, 0x21CF02),
        "CRC-24/OS-9": _Model(24, 0x800063, 0xFFFFFF, False, False, 0xFFFFFF, 0x200FA5),
        "CRC-32/AIXM": _Model(32, 0x814141AB, 0x0, False, False, 0x0, 0x3010BF7F),
        "CRC-32/AUTOSAR": _Model(32, 0xF4ACFB13, 0xFFFFFFFF, True, True, 0xFFFFFFFF, 0x1697D06A),
        "CRC-32/BASE91-D": _Model(32, 0xA833982B, 0xFFFFFFFF, True, True, 0xFFFFFFFF, 0x87315576),
        "CRC-32/BZIP2": _Model(32, 0x4C11DB7, 0xFFFFFFFF, False, False, 0xFFFFFFFF, 0xFC891918),
        "CRC-32/CD-ROM-EDC": _Model(32, 0x8001801B, 0x0, True, True, 0x0, 0x6EC2EDC4),
        "CRC-32/CKSUM": _Model(32, 0x4C11DB7, 0x0, False, False, 0xFFFFFFFF, 0x765E7680),
        "CRC-32/ISCSI": _Model(32, 0x1EDC6F41, 0xFFFFFFFF, True, True, 0xFFFFFFFF, 0xE3069283),
        "CRC-32/ISO-HDLC": _Model(32, 0x4C11DB7, 0xFFFFFFFF, True, True, 0xFFFFFFFF, 0xCBF43926),
        "CRC-32/JAMCRC": _Model(32, 0x4C11DB7, 0xFFFFFFFF, True, True, 0x0, 0x340BC6D9),
        "CRC-32/MEF": _Model(32, 0x741B8CD7, 0xFFFFFFFF, True, True, 0x0, 0xD2C22F51),
        "CRC-32/MPEG-2": _Model(32, 0x4C11DB7, 0xFFFFFFFF, False, False, 0x0, 0x376E6E7),
        "CRC-32/XFER": _Model(32, 0xAF, 0x0, False, False, 0x0, 0xBD0BE338),
        "CRC-40/GSM": _Model(40, 0x4820009, 0x0, False, False, 0xFFFFFFFFFF, 0xD4164FC646),
        "CRC-64/ECMA-182": _Model(
            64, 0x42F0E1EBA9EA3693, 0x0, False, False, 0x0, 0x6C40DF5F0B497347
        ),
        "CRC-64/GO-ISO": _Model(
            64, 0x1B, 0xFFFFFFFFFFFFFFFF, True, True, 0xFFFFFFFFFFFFFFFF, 0xB90956C775A41001
        ),
        "CRC-64/MS": _Model(
            64, 0x259C84CBA6426349, 0xFFFFFFFFFFFFFFFF, True, True, 0x0, 0x75D4B74F024ECEEA
        ),
        "CRC-64/NVME": _Model(
            64,
            0xAD93D23594C93659,
            0xFFFFFFFFFFFFFFFF,
            True,
            True,
            0xFFFFFFFFFFFFFFFF,
            0xAE8B14860A799888,
        ),
        "CRC-64/REDIS": _Model(64, 0xAD93D23594C935A9, 0x0, True, True, 0x0, 0xE9C6D914C4B8D9CA),
        "CRC-64/WE": _Model(
            64,
            0x42F0E1EBA9EA3693,
            0xFFFFFFFFFFFFFFFF,
            False,
            False,
            0xFFFFFFFFFFFFFFFF,
            0x62EC59E3F1A4F00A,
        ),
        "CRC-64/XZ": _Model(
            64,
            0x42F0E1EBA9EA3693,
            0xFFFFFFFFFFFFFFFF,
            True,
            True,
            0xFFFFFFFFFFFFFFFF,
            0x995DC9BBDF1939FA,
        ),
    }
)
#: another catalogue name of a model → its own name
ALIASES = MappingProxyType(
    {
        "CRC-8/ITU": "CRC-8/I-432-1",
        "CRC-8/MAXIM": "CRC-8/MAXIM-DOW",
        "DOW-CRC": "CRC-8/MAXIM-DOW",
        "CRC-8": "CRC-8/SMBUS",
        "CRC-8/AES": "CRC-8/TECH-3250",
        "CRC-8/EBU": "CRC-8/TECH-3250",
        "ARC": "CRC-16/ARC",
        "CRC-16": "CRC-16/ARC",
        "CRC-16/LHA": "CRC-16/ARC",
        "CRC-IBM": "CRC-16/ARC",
        "R-CRC-16": "CRC-16/DECT-R",
        "X-CRC-16": "CRC-16/DECT-X",
        "CRC-16/DARC": "CRC-16/GENIBUS",
        "CRC-16/EPC": "CRC-16/GENIBUS",
        "CRC-16/EPC-C1G2": "CRC-16/GENIBUS",
        "CRC-16/I-CODE": "CRC-16/GENIBUS",
        "CRC-16/AUTOSAR": "CRC-16/IBM-3740",
        "CRC-16/CCITT-FALSE": "CRC-16/IBM-3740",
        "CRC-16/ISO-HDLC": "CRC-16/IBM-SDLC",
        "CRC-16/ISO-IEC-14443-3-B": "CRC-16/IBM-SDLC",
        "CRC-16/X-25": "CRC-16/IBM-SDLC",
        "CRC-B": "CRC-16/IBM-SDLC",
        "X-25": "CRC-16/IBM-SDLC",
        "CRC-A": "CRC-16/ISO-IEC-14443-3-A",
        "CRC-16/BLUETOOTH": "CRC-16/KERMIT",
        "CRC-16/CCITT": "CRC-16/KERMIT",
        "CRC-16/CCITT-TRUE": "CRC-16/KERMIT",
        "CRC-16/V-41-LSB": "CRC-16/KERMIT",
        "CRC-CCITT": "CRC-16/KERMIT",
        "KERMIT": "CRC-16/KERMIT",
        "CRC-16/MAXIM": "CRC-16/MAXIM-DOW",
        "MODBUS": "CRC-16/MODBUS",
        "CRC-16/IEC-61158-2": "CRC-16/PROFIBUS",
        "CRC-16/AUG-CCITT": "CRC-16/SPI-FUJITSU",
        "CRC-16/BUYPASS": "CRC-16/UMTS",
        "CRC-16/VERIFONE": "CRC-16/UMTS",
        "CRC-16/ACORN": "CRC-16/XMODEM",
        "CRC-16/LTE": "CRC-16/XMODEM",
        "CRC-16/V-41-MSB": "CRC-16/XMODEM",
        "XMODEM": "CRC-16/XMODEM",
        "ZMODEM": "CRC-16/XMODEM",
        "CRC-24": "CRC-24/OPENPGP",
        "CRC-32Q": "CRC-32/AIXM",
        "CRC-32D": "CRC-32/BASE91-D",
        "CRC-32/AAL5": "CRC-32/BZIP2",
        "CRC-32/DECT-B": "CRC-32/BZIP2",
        "B-CRC-32": "CRC-32/BZIP2",
        "CKSUM": "CRC-32/CKSUM",
        "CRC-32/POSIX": "CRC-32/CKSUM",
        "CRC-32/BASE91-C": "CRC-32/ISCSI",
        "CRC-32/CASTAGNOLI": "CRC-32/ISCSI",
        "CRC-32/INTERLAKEN": "CRC-32/ISCSI",
        "CRC-32C": "CRC-32/ISCSI",
        "CRC-32/NVME": "CRC-32/ISCSI",
        "CRC-32": "CRC-32/ISO-HDLC",
        "CRC-32/ADCCP": "CRC-32/ISO-HDLC",
        "CRC-32/V-42": "CRC-32/ISO-HDLC",
        "CRC-32/XZ": "CRC-32/ISO-HDLC",
        "PKZIP": "CRC-32/ISO-HDLC",
        "JAMCRC": "CRC-32/JAMCRC",
        "XFER": "CRC-32/XFER",
        "CRC-64": "CRC-64/ECMA-182",
        "CRC-64/GO-ECMA": "CRC-64/XZ",
    }
)
