"""Every codec verld speaks, by name: its traits and both sides of its framing.

Strategy: one `CodecSpec` per codec, declared at the end of its own module and
looked up here by the config's `device.codec`. `_SPECS` is the only list of built-in
codecs; `CODECS` is the one list of every codec (the config's choices, `verld
--codec`'s help and `verld-sim --codec` read it): the built-ins, then the plugins.
Nothing outside this registry and the codec modules' own specs compares codec names:
code that must behave differently per codec asks the spec for a trait (`pipelined`,
`bus`, `rtu`, `text`, `events`), a factory (`host`, `device`, `commands`,
`device_ping`) or its settings check (`check`). Adding a built-in codec is one module
and one line in `_SPECS`.

Plugins (docs/codecs.md): a package's entry point in the group `verld.codecs`, named
as its codec, whose object is a `CodecSpec` (`verld.codec.api`). Their names are read
from the installed packages' metadata, without importing anything; a plugin is
imported the first time its spec is asked for (the config's codec: only that one;
`verld --list-codecs`: all). One that cannot be used (it fails to import, its object
is not a CodecSpec or is named otherwise, a built-in or another package has its name)
raises `PluginError`, which names its package: the config reports it as an invalid
`device.codec` (exit 2, one line), and `verld --list-codecs` lists it with why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from verld.codec.frame import FRAME
from verld.codec.length import LENGTH
from verld.codec.line import LINE
from verld.codec.modbus.rtu import MODBUS_RTU
from verld.codec.modbus.tcp import MODBUS_TCP
from verld.codec.spec import CodecSpec, Settings
from verld.codec.verl import VERL

__all__ = [
    "CODECS",
    "GROUP",
    "CodecSpec",
    "Codecs",
    "Listed",
    "PluginError",
    "Settings",
    "retry_of",
    "spec",
    "spec_of",
]

#: the entry point group a codec plugin declares itself in
GROUP = "verld.codecs"

#: the built-in codecs (the config's `device.codec` choices begin with these names, in
#: this order): the default comes first
_SPECS = (VERL, LENGTH, LINE, MODBUS_RTU, MODBUS_TCP, FRAME)


class PluginError(KeyError):
    """A codec plugin that cannot be used: its name, its package and why."""

    def __init__(self, name: str, package: str, why: str) -> None:
        super().__init__(name)
        self.name, self.package, self.why = name, package, why

    def __str__(self) -> str:
        return f"codec plugin {self.name!r} from package {self.package}: {self.why}"


@dataclass(frozen=True, slots=True)
class Listed:
    """One codec as `verld --list-codecs` shows it."""

    name: str
    origin: str  #: "built-in", or the plugin's package and version
    error: str | None = None  #: why the plugin cannot be used (None: it can)


def _package(point: EntryPoint) -> str:
    """The package that installed `point`, with its version (its module where unknown)."""
    dist = point.dist
    if dist is None:
        return point.module
    return f"{dist.name} {dist.version}"


def _installed() -> list[EntryPoint]:
    """The codec plugins' entry points in the installed packages (sys.path's)."""
    return list(entry_points(group=GROUP))


class Codecs(MutableMapping[str, CodecSpec]):
    """Every codec by name: the built-ins, then the installed plugins (loaded on first
    use). Assigning a name registers a codec as a built-in (tests/test_recipes.py's
    throwaway codec, standing for a line in `_SPECS`)."""

    def __init__(
        self,
        builtins: Iterable[CodecSpec],
        installed: Callable[[], list[EntryPoint]] = _installed,
    ) -> None:
        self._builtins = {codec.name: codec for codec in builtins}
        self._installed = installed
        self._points: dict[str, list[EntryPoint]] | None = None
        self._loaded: dict[str, CodecSpec | PluginError] = {}

    def points(self) -> dict[str, list[EntryPoint]]:
        """The plugins' entry points by name (read once, from the packages' metadata)."""
        if self._points is None:
            found: dict[str, list[EntryPoint]] = {}
            for point in self._installed():
                found.setdefault(point.name, []).append(point)
            self._points = found
        return self._points

    def _plugin_names(self) -> list[str]:
        return sorted(name for name in self.points() if name not in self._builtins)

    def __iter__(self) -> Iterator[str]:
        yield from self._builtins
        yield from self._plugin_names()

    def __len__(self) -> int:
        return len(self._builtins) + len(self._plugin_names())

    def __contains__(self, name: object) -> bool:
        """A codec of that name exists (a plugin's is not imported to answer)."""
        return isinstance(name, str) and (name in self._builtins or name in self.points())

    def __getitem__(self, name: str) -> CodecSpec:
        """The codec `name`; a plugin is imported the first time (`PluginError`: it
        cannot be used; `KeyError`: there is no such codec)."""
        builtin = self._builtins.get(name)
        if builtin is not None:
            return builtin
        if name not in self.points():
            raise KeyError(name)
        loaded = self._loaded.get(name)
        if loaded is None:
            loaded = self._loaded[name] = self._load(name)
        if isinstance(loaded, PluginError):
            raise loaded
        return loaded

    def __setitem__(self, name: str, codec: CodecSpec) -> None:
        self._builtins[name] = codec

    def __delitem__(self, name: str) -> None:
        del self._builtins[name]

    def _load(self, name: str) -> CodecSpec | PluginError:
        """Import the plugin `name`: its spec, or why it cannot be used."""
        (point, *others) = self.points()[name]
        package = _package(point)
        if others:
            also = ", ".join(_package(other) for other in others)
            return PluginError(name, package, f"the name is taken by package {also} too")
        if name != name.lower():  # the config compares codec names in lower case
            return PluginError(name, package, "a codec's name is in lower case")
        try:
            loaded = point.load()
        except Exception as exc:  # whatever the plugin's import raises, said in one line
            return PluginError(name, package, f"failed to load: {type(exc).__name__}: {exc}")
        if not isinstance(loaded, CodecSpec):
            kind = type(loaded).__name__
            why = f"{point.value} is a {kind}, not a verld.codec.api.CodecSpec"
            return PluginError(name, package, why)
        if loaded.name != name:
            why = f"its CodecSpec is named {loaded.name!r}, not {name!r}"
            return PluginError(name, package, why)
        return loaded

    def builtins(self) -> list[CodecSpec]:
        """The built-in codecs, in `_SPECS`'s order (nothing is imported)."""
        return list(self._builtins.values())

    def clashes(self) -> list[PluginError]:
        """The plugins whose name is taken (by a built-in, or by another package's
        plugin), found from the metadata alone: nothing is imported."""
        found = []
        for name, points in self.points().items():
            for point in points:
                if name in self._builtins:
                    why = "the name is taken by the built-in codec"
                elif len(points) > 1:
                    why = "the name is taken by another package's plugin too"
                else:
                    continue
                found.append(PluginError(name, _package(point), why))
        return found

    def listing(self) -> list[Listed]:
        """Every codec with where it comes from, each plugin imported to see it works."""
        listed = [Listed(name, "built-in") for name in self._builtins]
        clashes = {(clash.name, clash.package): clash.why for clash in self.clashes()}
        for name, points in sorted(self.points().items()):
            for point in points:
                package = _package(point)
                error = clashes.get((name, package))
                if error is None:
                    try:
                        self[name]
                    except PluginError as exc:
                        error = exc.why
                listed.append(Listed(name, package, error))
        return listed


#: every codec by name: the built-ins in `_SPECS`'s order, then the installed plugins
CODECS = Codecs(_SPECS)


def spec(name: str) -> CodecSpec:
    """The codec called `name` (the config schema has checked it is one, and loads)."""
    try:
        return CODECS[name]
    except PluginError:
        raise
    except KeyError:
        raise ValueError(f"unknown codec {name!r}") from None


def spec_of(cfg: Settings) -> CodecSpec:
    """The codec `cfg.device.codec` names, as `cfg` sets it up (`CodecSpec.settled`)."""
    return spec(cfg.device.codec).settled(cfg)


def retry_of(cfg: Settings) -> int:
    """`device.retry`, or where it is null the codec's own default."""
    retry = cfg.device.retry
    return spec_of(cfg).retry if retry is None else retry
