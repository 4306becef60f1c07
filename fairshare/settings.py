"""The one fair-share settings object: read by ``hourglass run`` (the scheduler) and ``hourglass fairshare``.

Both services call :func:`load_settings` with the same four layers, highest first:

1. command-line flags (:func:`add_settings_arguments` gives both services the same ones);
2. environment variables ``HOURGLASS_FAIRSHARE_<FIELD>`` (``HOURGLASS_FAIRSHARE_K_VALUE=0.5``);
3. the settings file (``--fairshare-config FILE``: YAML of the fields, plus the fairshare service's
   ``prometheus:`` mapping; or a KAI ``SchedulingShard``, read with KAI's names and KAI's default of no
   time-based fair share without ``usageDBConfig``, :mod:`ingest.kube.kai_shard`);
4. the defaults, which are KAI's: kValue 1.0, a 1-week sliding window, no half-life, 1-minute refresh,
   5-minute staleness (spec section 4.4). Time-based fair share is therefore on unless ``k_value`` is 0.

The scheduler uses ``k_value`` (the weight of historical usage in the over-quota division); the fairshare
service uses the window, decay, refresh and staleness to compute the usage the scheduler reads. A bad
value in any layer is a :class:`~fairshare.config.FairshareConfigError` that names the field, the value
and where it came from; an unknown ``HOURGLASS_FAIRSHARE_*`` variable is an error too (a typo would
otherwise silently leave the default in force).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from fairshare.config import FairshareConfig, FairshareConfigError, describe_errors
from ingest.kube.kai_shard import ShardError, is_shard, read_shard

log = logging.getLogger(__name__)

__all__ = [
    "CLI_FLAGS",
    "ENV_PREFIX",
    "FairshareSettings",
    "LoadedSettings",
    "add_settings_arguments",
    "cli_overrides",
    "load_settings",
]

#: Prefix of the environment variables: ``HOURGLASS_FAIRSHARE_K_VALUE`` sets ``k_value``.
ENV_PREFIX = "HOURGLASS_FAIRSHARE_"

#: Field -> command-line flag, the same for ``run`` and ``fairshare``.
CLI_FLAGS: dict[str, str] = {
    "k_value": "--k-value",
    "half_life_s": "--half-life",
    "window_s": "--window",
    "window_type": "--window-type",
    "tumbling_anchor_ms": "--tumbling-anchor-ms",
    "refresh_s": "--refresh",
    "staleness_s": "--staleness",
}


class FairshareSettings(BaseSettings, FairshareConfig):
    """:class:`~fairshare.config.FairshareConfig` as pydantic-settings: the same fields, validation and
    defaults, plus the ``HOURGLASS_FAIRSHARE_`` environment prefix.

    Constructing it directly uses only the given values (so tests and library callers are not changed by
    the process environment); :func:`load_settings` layers flags, environment and file.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=False,
        frozen=True,
        extra="forbid",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only the constructor's values: the environment is read by :func:`load_settings`, explicitly."""
        return (init_settings,)


@dataclass(frozen=True)
class LoadedSettings:
    """What :func:`load_settings` found: the settings, the file's ``prometheus:`` mapping, and provenance."""

    settings: FairshareSettings
    #: The settings file's ``prometheus:`` mapping (only the fairshare service uses it), ``None`` without.
    prometheus: dict[str, Any] | None = None
    #: Field -> where its value came from: ``default``, ``file PATH``, ``env NAME`` or ``flag --x``.
    origins: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One log line: every field with its value and, when not the default, its source."""
        parts = []
        for name in FairshareConfig.model_fields:
            origin = self.origins.get(name, "default")
            value = getattr(self.settings, name)
            parts.append(f"{name}={value!r}" + ("" if origin == "default" else f" ({origin})"))
        return ", ".join(parts)


def _read_file(path: str | Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise FairshareConfigError(f"cannot read fairshare config {path}: {err}") from None
    except RecursionError:  # PyYAML recurses per nesting level
        raise FairshareConfigError(f"cannot read fairshare config {path}: nested too deeply") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FairshareConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    if is_shard(data):
        try:
            shard = read_shard(data)
        except ShardError as err:
            raise FairshareConfigError(f"{path}: {err}") from None
        if (warning := shard.warning(str(path))) is not None:
            log.warning("%s", warning)
        return dict(shard.fairshare), shard.prometheus
    data = {str(k): v for k, v in data.items()}
    prom = data.pop("prometheus", None)
    if prom is not None and not isinstance(prom, dict):
        raise FairshareConfigError(f"{path}: prometheus must be a mapping, got {type(prom).__name__}")
    unknown = sorted(set(data) - set(FairshareConfig.model_fields))
    if unknown:
        known = ", ".join([*FairshareConfig.model_fields, "prometheus"])
        raise FairshareConfigError(f"{path}: unknown setting(s) {', '.join(unknown)} (known: {known})")
    return data, prom


def _read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    names = {ENV_PREFIX + f.upper() for f in FairshareConfig.model_fields}
    unknown = sorted(k for k in environ if k.upper().startswith(ENV_PREFIX) and k.upper() not in names)
    if unknown:
        raise FairshareConfigError(
            f"unknown environment variable(s) {', '.join(unknown)} (known: {', '.join(sorted(names))})"
        )
    source = EnvSettingsSource(FairshareSettings)
    source.env_vars = {k.lower(): v for k, v in environ.items()}
    values = {k: v for k, v in source().items() if k in FairshareConfig.model_fields}
    # "null" (any case) = None, e.g. HOURGLASS_FAIRSHARE_HALF_LIFE_S=null for no decay over a file's value.
    for k, v in values.items():
        if isinstance(v, str) and v.strip().lower() == "null":
            values[k] = None
    return values


def load_settings(
    config_file: str | Path | None = None,
    cli: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LoadedSettings:
    """The fair-share settings: ``cli`` over ``environ`` (default ``os.environ``) over ``config_file`` over
    the defaults. Raises :class:`~fairshare.config.FairshareConfigError` naming field, value and source."""
    layers: list[tuple[str, dict[str, Any]]] = []
    prom = None
    if config_file is not None:
        file_values, prom = _read_file(config_file)
        layers.append((f"file {config_file}", file_values))
    env_values = _read_env(os.environ if environ is None else environ)
    layers.append(("env", env_values))
    cli_values = dict(cli or {})
    unknown = sorted(set(cli_values) - set(FairshareConfig.model_fields))
    if unknown:
        raise FairshareConfigError(f"unknown setting(s) {', '.join(unknown)}")
    layers.append(("flag", cli_values))
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for label, values in layers:
        for name, value in values.items():
            merged[name] = value
            if label == "env":
                origins[name] = f"env {ENV_PREFIX}{name.upper()}"
            elif label == "flag":
                origins[name] = f"flag {CLI_FLAGS[name]}"
            else:
                origins[name] = label
    try:
        settings = FairshareSettings(**merged)
    except FairshareConfigError as err:
        if err.validation is None:
            raise
        raise FairshareConfigError(describe_errors(err.validation, origins), err.validation) from None
    return LoadedSettings(settings, prom, origins)


def add_settings_arguments(p: argparse.ArgumentParser, *, config_aliases: tuple[str, ...] = ()) -> None:
    """The fair-share flags both ``run`` and ``fairshare`` take (values are validated by the settings)."""
    g = p.add_argument_group(
        "time-based fair share (one setting for `run` and `fairshare`; flag > HOURGLASS_FAIRSHARE_* env >"
        " --fairshare-config file > KAI's defaults; docs/fairshare.md)"
    )
    g.add_argument(
        "--fairshare-config",
        *config_aliases,
        dest="fairshare_config",
        metavar="FILE",
        default=None,
        help="YAML of the fair-share settings (k_value, half_life_s, window_s, ...) and, for `fairshare"
        " --source prometheus`, a `prometheus:` mapping",
    )
    g.add_argument(
        "--k-value",
        dest="k_value",
        metavar="K",
        default=None,
        help="weight of historical usage in the over-quota division, >= 0; 0 = classic fair share"
        " (default 1.0, KAI's kValue)",
    )
    g.add_argument(
        "--half-life",
        dest="half_life_s",
        metavar="SECONDS",
        default=None,
        help="usage decay half-life in seconds; 0 or null = no decay (default: no decay, as KAI)",
    )
    g.add_argument(
        "--window",
        dest="window_s",
        metavar="SECONDS",
        default=None,
        help="usage window in seconds (default 604800 = 1 week, as KAI)",
    )
    g.add_argument("--window-type", dest="window_type", default=None, help="sliding (default) or tumbling")
    g.add_argument(
        "--tumbling-anchor-ms",
        dest="tumbling_anchor_ms",
        metavar="MS",
        default=None,
        help="epoch ms of one tumbling-window boundary (default 0)",
    )
    g.add_argument(
        "--refresh",
        dest="refresh_s",
        metavar="SECONDS",
        default=None,
        help="seconds between usage recomputations (default 60, KAI's fetchInterval)",
    )
    g.add_argument(
        "--staleness",
        dest="staleness_s",
        metavar="SECONDS",
        default=None,
        help="how long the last good usage stays valid while its source fails (default 300)",
    )


def cli_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The fair-share fields given on the command line (flags left out are not in the result)."""
    out: dict[str, Any] = {}
    for name in CLI_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            out[name] = None if value == "null" else value
    return out
