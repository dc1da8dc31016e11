"""NMEA 0183 sentences for verld-sim's GPS mode, without I/O.

Strategy: one `Fix` (where the simulated receiver is and how good its fix is)
and one UTC time (passed in: this module reads no clock) make one *fix*: the
sentences a GPS receiver sends per navigation cycle, in this order:

- `$GPGGA`: time, position, fix quality 1 (GPS), satellites used, HDOP, altitude;
- `$GPRMC`: time, status A (valid), position, speed and course, date;
- `$GPGSA`: auto mode, fix mode 3 (3D), the PRNs used, PDOP / HDOP / VDOP.

gpsd (3.22) takes its time of day and date from RMC, and its 2D/3D mode from
GSA: GGA alone gives it no mode. Every sentence carries the XOR checksum of the
text between `$` and `*` as two upper-case hex digits; terminators are the
caller's business (the sim ends each sentence with its line terminator).

Positions are written as NMEA's degrees and minutes with four decimals of a
minute (`ddmm.mmmm`, `dddmm.mmmm`; about 0.2 m), rounded once in integer
ten-thousandths of a minute so that a minute never reads 60. Times are written
`hhmmss.ss` (truncated to hundredths), dates `ddmmyy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

TALKER = "GP"  #: the talker id: a GPS-only receiver
MAX_SATELLITES = 12  #: GSA has twelve PRN fields
_MINUTE_UNITS = 10_000  #: a minute is written with four decimals


@dataclass(frozen=True)
class Fix:
    """What the simulated receiver reports: a fixed position and fix quality.

    `lat` / `lon` are signed decimal degrees (south / west negative); `altitude`
    is metres above mean sea level and `geoid` the geoid separation (GGA);
    `speed` is knots and `course` degrees true (RMC). The defaults are about
    the textbook GGA example's fix (48°07.038' N 11°31.000' E, Munich).
    """

    lat: float = 48.1173
    lon: float = 11.5167
    altitude: float = 545.4
    geoid: float = 46.9
    satellites: int = 8
    hdop: float = 0.9
    vdop: float = 1.2
    speed: float = 0.0
    course: float = 0.0

    def __post_init__(self) -> None:
        if not -90.0 <= self.lat <= 90.0:
            raise ValueError(f"latitude must be -90..90, got {self.lat}")
        if not -180.0 <= self.lon <= 180.0:
            raise ValueError(f"longitude must be -180..180, got {self.lon}")
        if not 1 <= self.satellites <= MAX_SATELLITES:
            raise ValueError(f"satellites must be 1..{MAX_SATELLITES}, got {self.satellites}")
        for name in ("altitude", "geoid", "hdop", "vdop", "speed", "course"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        if min(self.hdop, self.vdop, self.speed) < 0 or not 0 <= self.course < 360:
            raise ValueError("hdop, vdop and speed must be >= 0, course 0..360")

    @property
    def pdop(self) -> float:
        """Position dilution: sqrt(HDOP² + VDOP²)."""
        return math.hypot(self.hdop, self.vdop)


def checksum(body: str) -> str:
    """The NMEA checksum of `body` (the text between `$` and `*`): two hex digits."""
    value = 0
    for byte in body.encode("ascii"):
        value ^= byte
    return f"{value:02X}"


def sentence(body: str) -> str:
    """`$body*CS`: one sentence, checksum added, no terminator."""
    return f"${body}*{checksum(body)}"


def fix_sentences(fix: Fix, when: datetime) -> list[str]:
    """One navigation cycle, GGA + RMC + GSA, stamped `when` (naive: taken as UTC)."""
    return [gga(fix, when), rmc(fix, when), gsa(fix)]


def gga(fix: Fix, when: datetime) -> str:
    """`$GPGGA`: fix data, quality 1, altitude and geoid separation in metres."""
    fields = [
        f"{TALKER}GGA",
        _time(when),
        *_position(fix),
        "1",
        f"{fix.satellites:02d}",
        f"{fix.hdop:.1f}",
        f"{fix.altitude:.1f}",
        "M",
        f"{fix.geoid:.1f}",
        "M",
        "",  # age of differential data: no DGPS
        "",  # differential station id
    ]
    return sentence(",".join(fields))


def rmc(fix: Fix, when: datetime) -> str:
    """`$GPRMC`: status A, speed (knots) and course, date; mode indicator A (NMEA 2.3)."""
    stamp = _utc(when)
    fields = [
        f"{TALKER}RMC",
        _time(stamp),
        "A",
        *_position(fix),
        f"{fix.speed:.1f}",
        f"{fix.course:.1f}",
        stamp.strftime("%d%m%y"),
        "",  # magnetic variation: unknown
        "",
        "A",
    ]
    return sentence(",".join(fields))


def gsa(fix: Fix) -> str:
    """`$GPGSA`: automatic 2D/3D, fix mode 3, PRNs 1..satellites used, dilutions."""
    prns = [f"{prn:02d}" for prn in range(1, fix.satellites + 1)]
    prns += [""] * (MAX_SATELLITES - len(prns))
    dops = [f"{fix.pdop:.1f}", f"{fix.hdop:.1f}", f"{fix.vdop:.1f}"]
    return sentence(",".join([f"{TALKER}GSA", "A", "3", *prns, *dops]))


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _time(when: datetime) -> str:
    stamp = _utc(when)
    return f"{stamp:%H%M%S}.{stamp.microsecond // 10_000:02d}"


def _position(fix: Fix) -> list[str]:
    """The four position fields: latitude, N/S, longitude, E/W."""
    return [
        _angle(fix.lat, 2),
        "N" if fix.lat >= 0 else "S",
        _angle(fix.lon, 3),
        "E" if fix.lon >= 0 else "W",
    ]


def _angle(degrees: float, width: int) -> str:
    """|degrees| as `d…dmm.mmmm`, the degrees zero-padded to `width` digits."""
    units = round(abs(degrees) * 60 * _MINUTE_UNITS)
    whole, rest = divmod(units, 60 * _MINUTE_UNITS)
    minutes, fraction = divmod(rest, _MINUTE_UNITS)
    return f"{whole:0{width}d}{minutes:02d}.{fraction:04d}"
