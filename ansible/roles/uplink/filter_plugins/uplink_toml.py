"""The role's filters. `uplink_toml`: inventory data (dicts and lists) to the TOML that uplink
reads; `uplink_has_secrets`: whether such data (or a manifest's YAML text) holds a key, so the
tasks that write it show no diff; `uplink_seconds`: one of uplink's durations in seconds.

Ansible has no TOML writer and the controller's Python has only a reader (tomllib), so this is
a small emitter for the subset uplink's config uses: tables, arrays of tables, strings,
integers, floats, booleans, arrays and inline tables.

- A mapping becomes a `[table]`; a list whose items are all mappings becomes `[[array]]`
  tables (so `bgp.routers[].neighbors[]` reads like docs/examples/uplink.toml).
- `None`, Ansible's `omit` placeholder and, with `drop_empty` (the default), empty lists and
  mappings are left out: uplink treats a missing key and an empty one alike, and inventories
  can then leave sections empty without writing `[bgp]` headers with nothing under them.
- Ansible hands a template such as "{{ tor.asn }}" over as the string "65102" even when the
  value is an integer (non-native Jinja); uplink wants an integer there. So a string of digits
  under one of uplink's integer keys (`INTEGER_KEYS`) is written as an integer, except inside
  label maps, whose values are always strings.
- An ansible-vault value is written as the string it decrypts to.
- Strings are TOML basic strings. JSON's escapes are TOML's (\\", \\\\, \\n, \\uXXXX), except
  that JSON may write a surrogate pair, which TOML forbids; `ensure_ascii=False` keeps
  non-ASCII text as it is, so none is ever written.
"""

import json
import math
import re
from collections.abc import Mapping, Sequence

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
OMIT_PREFIX = "__omit_place_holder__"
# uplink's integer fields (daemon/src/config/raw.rs, announce.rs; ebgp_multihop and
# ttl_security take true/false or a hop count) and nmstate's in network policies' desired_state.
INTEGER_KEYS = frozenset({
    "asn", "port", "max_prefixes", "max_prefixes_threshold", "maximum_paths", "table", "metric", "detect_multiplier",
    "minimum_ttl", "local_pref", "ge", "le", "priority", "aggregation_length",
    "expected_status", "rise", "fall", "ebgp_multihop", "ttl_security",
    "id", "mtu", "prefix-length", "table-id", "route-table", "route-table-id",
})
DIGITS = re.compile(r"^-?[0-9]+$")


class TomlError(ValueError):
    """A value TOML (or uplink) cannot hold; the message names where it is."""


def _is_list(value):
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _is_omitted(value):
    return value is None or (isinstance(value, str) and value.startswith(OMIT_PREFIX))


def _clean(value, drop_empty, key=None, in_labels=False):
    """Drops omitted (and, with drop_empty, empty) values, depth first; integers back."""
    # An ansible-vault value (`password: !vault |`) is a Sequence of characters until it is
    # made a string, which decrypts it.
    if getattr(value, "__ENCRYPTED__", False):
        value = str(value)
    if isinstance(value, Mapping):
        labels = in_labels or (isinstance(key, str) and key.endswith("labels"))
        out = {}
        for k, item in value.items():
            item = _clean(item, drop_empty, k, labels)
            if not _is_omitted(item) and not (drop_empty and _is_empty(item)):
                out[k] = item
        return out
    if _is_list(value):
        return [_clean(item, drop_empty, key, in_labels) for item in value if not _is_omitted(item)]
    if isinstance(value, str) and not in_labels and key in INTEGER_KEYS and DIGITS.match(value):
        return int(value)
    return value


def _is_empty(value):
    return (isinstance(value, Mapping) or _is_list(value)) and len(value) == 0


def _key(key, where):
    if not isinstance(key, str):
        raise TomlError(f"{where}: key {key!r} is not a string")
    return key if BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _value(value, where):
    # bool before int: True is an int in Python.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TomlError(f"{where}: {value} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, Mapping):
        items = ", ".join(
            f"{_key(k, where)} = {_value(v, f'{where}.{k}')}" for k, v in value.items()
        )
        return "{ " + items + " }" if items else "{}"
    if _is_list(value):
        return "[" + ", ".join(_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    raise TomlError(f"{where}: {type(value).__name__} {value!r} has no TOML form")


def _is_table_array(value):
    return _is_list(value) and len(value) > 0 and all(isinstance(v, Mapping) for v in value)


def _table(lines, path, table):
    """Emits the keys of `table` (whose header the caller wrote), then its sub-tables."""
    nested = []
    for key, value in table.items():
        where = ".".join(path + [str(key)])
        if isinstance(value, Mapping) or _is_table_array(value):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key, where)} = {_value(value, where)}")
    for key, value in nested:
        sub = path + [key]
        header = ".".join(_key(k, ".".join(map(str, sub))) for k in sub)
        if isinstance(value, Mapping):
            # A table that holds only tables needs no header of its own.
            if any(not (isinstance(v, Mapping) or _is_table_array(v)) for v in value.values()) \
                    or not value:
                lines.extend(["", f"[{header}]"])
            _table(lines, sub, value)
        else:
            for item in value:
                lines.extend(["", f"[[{header}]]"])
                _table(lines, sub, item)


def uplink_toml(data, drop_empty=True):
    """Renders a mapping as a TOML document."""
    if not isinstance(data, Mapping):
        raise TomlError(f"uplink_toml needs a mapping, got {type(data).__name__}")
    lines = []
    _table(lines, [], _clean(data, drop_empty))
    return "\n".join(lines).strip("\n") + "\n"


# Keys whose value is a secret: a neighbor's TCP-MD5 `password`, a BFD profile's
# `authentication.password`, a manifest's `password` (BGPPeer, FRRConfiguration neighbors).
# Compared without case, `_` and `-`; `password_file` (a path) is not one.
SECRET_KEYS = frozenset({"password"})


def _secret_key(key):
    return isinstance(key, str) and key.lower().replace("_", "").replace("-", "") in SECRET_KEYS


def _holds_secret(value):
    if isinstance(value, Mapping):
        return any(
            (_secret_key(k) and not _is_omitted(v) and v != "") or _holds_secret(v)
            for k, v in value.items()
        )
    if _is_list(value):
        return any(_holds_secret(v) for v in value)
    return False


def uplink_has_secrets(value):
    """True when `value` (a config mapping, a list of manifest documents, or a manifest's YAML
    text) holds a non-empty value under a secret key. Text that is not YAML counts as secret:
    the answer decides whether a diff may be printed, so doubt hides it."""
    if isinstance(value, str):
        import yaml  # ansible-core's own dependency, on the controller

        try:
            return any(_holds_secret(d) for d in yaml.safe_load_all(value))
        except yaml.YAMLError:
            return True
    return _holds_secret(value)


DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m(?!s))?(?:([0-9]+)s)?(?:([0-9]+)ms)?$")


def uplink_seconds(text):
    """One of uplink's durations ("15s", "1m30s", "500ms": daemon/src/config/duration.rs) in
    whole seconds, rounded up."""
    match = DURATION.match(text.strip()) if isinstance(text, str) else None
    if not match or not text.strip():
        raise TomlError(f'{text!r} is not a duration uplink reads, e.g. "15s", "1m30s", "500ms"')
    hours, minutes, seconds, millis = (int(g or 0) for g in match.groups())
    total = ((hours * 60 + minutes) * 60 + seconds) * 1000 + millis
    return -(-total // 1000)


class FilterModule:
    """Ansible's entry point for the filters of this role."""

    def filters(self):
        return {
            "uplink_toml": uplink_toml,
            "uplink_has_secrets": uplink_has_secrets,
            "uplink_seconds": uplink_seconds,
        }
