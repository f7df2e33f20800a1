"""Reading the PR an envelope names, from every place it may be written.

An envelope (Crew call, delivery file) may name its PR in several places. They are read in
this order, and the first place that holds a field wins:

1. ``variables``
2. ``payload.args``, then the flat keys of ``payload``
3. the forge event inside the payload (``payload.event``, or ``payload`` itself when it is
   a forge event: ``repository``, ``pull_request``, ``issue``, ``number``)
4. ``VAR_*`` environment variables (``VAR_FORGE``, ``VAR_OWNER``, ``VAR_REPO``, ...)

Fields: ``forge`` (``github`` / ``gitea``; ``forgejo`` means ``gitea``), ``owner``, ``repo``,
``number``, ``head_sha`` (optional). Aliases: ``repository`` or ``repo`` as ``OWNER/NAME``
(``repo`` alone may be just the name, with ``owner``); ``pr``, ``pr_number``,
``pull_number``, ``index`` for ``number``.

A value that is present but cannot be read is an error naming the field, the value and
where it was read (``number: "abc" is not an integer (from variables.number)``). It never
falls through to a later place: a broken value is never silently replaced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reviewbot.core.models import FORGES, number_problem
from reviewbot.ingress.errors import TriggerError
from reviewbot.ingress.forge_kinds import forge_of_headers
from reviewbot.ingress.payload import EventReader, is_sha, shown, type_name

NUMBER_NAMES = ("number", "pr", "pr_number", "pull_number", "index")
REPO_NAMES = ("repository", "repo")
FIELD_NAMES = ("forge", "owner", *REPO_NAMES, *NUMBER_NAMES, "head_sha")
ENV_PREFIX = "VAR_"
FORGE_ALIASES = {"forgejo": "gitea"}

# Keys of a Crew payload that describe the call, not the PR.
_CALL_KEYS = frozenset({"function", "args", "from", "call_id", "event"})
_EVENT_KEYS = ("repository", "pull_request", "issue")
_NAME = re.compile(r"^[\w.-]{1,100}$")


@dataclass(frozen=True)
class Source:
    """One place fields can be read from, in read order.

    ``values`` maps a field name to ``(value, where)``; ``where`` names the exact spot
    (``variables.number``, ``VAR_NUMBER``). A value may be a :class:`TriggerError` standing
    for a spot that exists but could not be read: it is raised if the field is needed.
    """

    label: str
    values: Mapping[str, tuple[object, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PullTarget:
    """The PR an envelope names, and where each field was read."""

    forge: str
    owner: str
    name: str
    number: int
    head_sha: str | None
    origins: Mapping[str, str]

    @property
    def repo(self) -> str:
        return f"{self.owner}/{self.name}"

    def read_from(self) -> str:
        """One line for an explanation: ``forge=variables.forge, number=VAR_NUMBER ...``."""
        return ", ".join(f"{key}={where}" for key, where in self.origins.items())


def _object(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TriggerError(f"{where}: expected an object, got {type_name(value)}")
    return value


def mapping_source(label: str, values: Mapping[str, Any], prefix: str | None = None) -> Source:
    """The known field names of ``values``, each located as ``<prefix>.<key>``."""
    where = prefix if prefix is not None else label
    return Source(
        label,
        {
            key: (values[key], f"{where}.{key}")
            for key in FIELD_NAMES
            if key in values and not _blank(values[key])
        },
    )


def env_source(env: Mapping[str, str]) -> Source:
    found: dict[str, tuple[object, str]] = {}
    for key in FIELD_NAMES:
        name = ENV_PREFIX + key.upper()
        value = env.get(name)
        if value is not None and not _blank(value):
            found[key] = (value, name)
    return Source("VAR_* environment variables", found)


def event_source(
    event: Mapping[str, Any], where: str, headers: Mapping[str, str] | None = None
) -> Source:
    """The fields a forge event names: repository, PR number, head SHA, forge."""
    found: dict[str, tuple[object, str]] = {}
    reader = EventReader(event, f"forge event at {where}")
    if event.get("repository") is not None:
        try:
            owner, name = reader.repository()
            found["repository"] = (f"{owner}/{name}", f"{where}.repository")
        except TriggerError as exc:
            found["repository"] = (exc, f"{where}.repository")
    for path in ("pull_request.number", "number", "issue.number"):
        value = reader.get(path)
        if value is not None:
            found["number"] = (value, f"{where}.{path}")
            break
    sha = reader.get("pull_request.head.sha")
    if sha is not None:
        found["head_sha"] = (sha, f"{where}.pull_request.head.sha")
    forge = forge_of_headers(headers) if headers else None
    if forge is not None:
        found["forge"] = (forge, "the delivery's headers")
    return Source("the forge event in the payload", found)


def envelope_sources(
    envelope: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> list[Source]:
    """Every place of ``envelope`` (and ``env``) a PR can be named in, in read order."""
    variables = _object(envelope.get("variables"), "variables")
    payload = _object(envelope.get("payload"), "payload")
    args = _object(payload.get("args"), "payload.args")
    flat = {
        key: value
        for key, value in payload.items()
        if key not in _CALL_KEYS and not (key == "repository" and isinstance(value, Mapping))
    }
    sources = [
        mapping_source("variables", variables),
        mapping_source("payload.args", args),
        mapping_source("payload", flat),
    ]
    inner = payload.get("event")
    if isinstance(inner, Mapping):
        sources.append(event_source(inner, "payload.event", headers))
    elif any(isinstance(payload.get(key), Mapping) for key in _EVENT_KEYS) or headers:
        sources.append(event_source(payload, "payload", headers))
    sources.append(env_source(env or {}))
    return sources


def resolve_target(sources: Sequence[Source], *, configured_forges: Sequence[str]) -> PullTarget:
    """Read forge, owner, name, number and head SHA from ``sources`` in order.

    Raises :class:`TriggerError` with the exact reason when a field is missing everywhere
    or the first place that holds it holds something unreadable.
    """
    origins: dict[str, str] = {}
    forge = _resolve_forge(sources, configured_forges, origins)
    owner, name = _resolve_repo(sources, origins)
    number = _resolve_number(sources, origins)
    head_sha = _resolve_sha(sources, origins)
    return PullTarget(forge, owner, name, number, head_sha, origins)


def read_envelope(
    envelope: Mapping[str, Any],
    *,
    configured_forges: Sequence[str],
    env: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> PullTarget:
    """The PR named by ``envelope`` (see the module text for the read order)."""
    sources = envelope_sources(envelope, env=env, headers=headers)
    return resolve_target(sources, configured_forges=configured_forges)


# -- fields -------------------------------------------------------------------------------


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _places(sources: Sequence[Source]) -> str:
    labels = [s.label for s in sources]
    return ", ".join(labels[:-1]) + " and " + labels[-1] if len(labels) > 1 else "".join(labels)


def _first(sources: Sequence[Source], keys: Sequence[str]) -> tuple[object, str] | None:
    """The first ``(value, where)`` among ``keys`` in the first source holding one.

    Within one source, aliases that disagree are an error.
    """
    for source in sources:
        found = [source.values[key] for key in keys if key in source.values]
        if not found:
            continue
        for value, _where in found:
            if isinstance(value, TriggerError):
                raise value
        first_value, first_where = found[0]
        for value, where in found[1:]:
            if _normal(value) != _normal(first_value):
                raise TriggerError(
                    f"{keys[0]}: {first_where} ({shown(first_value)}) and {where} "
                    f"({shown(value)}) disagree"
                )
        return first_value, first_where
    return None


def _normal(value: object) -> object:
    """Equal spellings of one value compare equal (``5`` and ``"5"``)."""
    if isinstance(value, str):
        text = value.strip()
        return int(text) if text.isascii() and text.isdigit() else text.lower()
    return value


def _or(names: Sequence[str]) -> str:
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def parse_forge(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise TriggerError(f"forge: {shown(value)} is not {_or(FORGES)} (from {where})")
    forge = value.strip().lower()
    forge = FORGE_ALIASES.get(forge, forge)
    if forge not in FORGES:
        raise TriggerError(f"forge: {shown(value)} is not {_or(FORGES)} (from {where})")
    return forge


def default_forge(configured_forges: Sequence[str]) -> str:
    """The forge to use when none is named: the only configured one."""
    forges = [f for f in dict.fromkeys(configured_forges) if f in FORGES]
    if len(forges) == 1:
        return forges[0]
    if not forges:
        raise TriggerError("forge: missing, and no forge is configured to default to")
    raise TriggerError(
        "forge: missing; both github and gitea are configured, so the delivery must name one"
    )


def _resolve_forge(
    sources: Sequence[Source], configured_forges: Sequence[str], origins: dict[str, str]
) -> str:
    found = _first(sources, ("forge",))
    if found is None:
        origins["forge"] = "the only configured forge"
        return default_forge(configured_forges)
    value, where = found
    origins["forge"] = where
    return parse_forge(value, where)


def split_repo(value: object, where: str, *, name_only_ok: bool) -> tuple[str | None, str]:
    """``OWNER/NAME`` (or just ``NAME`` when allowed) -> ``(owner, name)``."""
    label = "repo" if name_only_ok else "repository"
    if not isinstance(value, str):
        raise TriggerError(f"{label}: {shown(value)} is not OWNER/NAME (from {where})")
    text = value.strip()
    if "/" not in text and name_only_ok and _NAME.match(text):
        return None, text
    owner, slash, name = text.partition("/")
    if not slash or not _NAME.match(owner) or not _NAME.match(name):
        raise TriggerError(f"{label}: {shown(value)} is not OWNER/NAME (from {where})")
    return owner, name


def _repo_in(source: Source) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """``((owner, where), (name, where))`` as far as ``source`` names them."""
    owner: tuple[str, str] | None = None
    name: tuple[str, str] | None = None
    for key in REPO_NAMES:
        if key not in source.values:
            continue
        value, where = source.values[key]
        if isinstance(value, TriggerError):
            raise value
        o, n = split_repo(value, where, name_only_ok=key == "repo")
        for part, current, label in ((o, owner, "owner"), (n, name, "name")):
            # Spellings of one name in two casings are one repository, as on the forges.
            if (
                part is not None
                and current is not None
                and current[0].casefold() != part.casefold()
            ):
                raise TriggerError(
                    f"repo: {current[1]} and {where} name different repositories "
                    f"({label} {shown(current[0])} vs {shown(part)})"
                )
        owner = owner or ((o, where) if o is not None else None)
        name = name or (n, where)
    if "owner" in source.values:
        value, where = source.values["owner"]
        if not isinstance(value, str) or not _NAME.match(value.strip()):
            raise TriggerError(f"owner: {shown(value)} is not an owner name (from {where})")
        if owner is not None and owner[0].casefold() != value.strip().casefold():
            raise TriggerError(
                f"owner: {where} ({shown(value)}) contradicts {owner[1]} ({shown(owner[0])})"
            )
        owner = owner or (value.strip(), where)
    return owner, name


def _resolve_repo(sources: Sequence[Source], origins: dict[str, str]) -> tuple[str, str]:
    owner: tuple[str, str] | None = None
    name: tuple[str, str] | None = None
    for source in sources:
        if owner is not None and name is not None:
            break
        o, n = _repo_in(source)
        if (
            name is not None
            and o is not None
            and n is not None
            and n[0].casefold() != name[0].casefold()
        ):
            raise TriggerError(
                f"owner: missing for repo {shown(name[0])} (from {name[1]}), and {n[1]} "
                f"names another repository ({shown(o[0] + '/' + n[0])})"
            )
        owner = owner or o
        name = name or n
    if name is None:
        raise TriggerError(
            f"repo: missing; looked in {_places(sources)} "
            "(names: repository or repo as OWNER/NAME, or owner with repo)"
        )
    if owner is None:
        raise TriggerError(
            f"owner: missing for repo {shown(name[0])} (from {name[1]}); "
            f"looked in {_places(sources)} (give repo as OWNER/NAME, or owner)"
        )
    origins["owner"], origins["repo"] = owner[1], name[1]
    return owner[0], name[0]


def parse_number(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise TriggerError(f"number: {shown(value)} is not an integer (from {where})")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise TriggerError(f"number: {shown(value)} is not an integer (from {where})")
    if number <= 0:
        raise TriggerError(f"number: {shown(value)} is not a positive PR number (from {where})")
    if number_problem(number) is not None:  # beyond what the store holds
        raise TriggerError(f"number: {shown(value)} is too large a PR number (from {where})")
    return number


def _resolve_number(sources: Sequence[Source], origins: dict[str, str]) -> int:
    found = _first(sources, NUMBER_NAMES)
    if found is None:
        raise TriggerError(
            f"number: missing; looked in {_places(sources)} (names: {', '.join(NUMBER_NAMES)})"
        )
    value, where = found
    origins["number"] = where
    return parse_number(value, where)


def parse_sha(value: object, where: str) -> str:
    if not isinstance(value, str) or not is_sha(value.strip()):
        raise TriggerError(
            f"head_sha: {shown(value)} is not a full commit SHA of 40 or 64 hex digits "
            f"(from {where})"
        )
    return value.strip().lower()


def _resolve_sha(sources: Sequence[Source], origins: dict[str, str]) -> str | None:
    found = _first(sources, ("head_sha",))
    if found is None:
        return None
    value, where = found
    origins["head_sha"] = where
    return parse_sha(value, where)
