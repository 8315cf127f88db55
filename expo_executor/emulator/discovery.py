"""A request checked against Google's published discovery documents (Compute v1, and the
Service Usage, Resource Manager, IAM, Cloud Storage and OAuth2 APIs the other fakes serve).

The fake Compute Engine answers what the real one answers only if it also refuses what the real
one refuses before any semantics: a field the API does not have, a value of the wrong JSON type,
an enum value it does not know, a query parameter it does not take. Those rules live in the
discovery document that ``google-api-python-client`` ships offline (pinned in setup.cfg, as the
document changes with every release), so they are read from there rather than written again.

Each check returns problems as the messages Google's front end answers a bad payload with
(``Invalid JSON payload received. Unknown name "foo" at 'instance_resource.scheduling': Cannot
find field.``), with paths in proto field names, as the real messages have them. The checks are
structural only; what the document cannot say (which machine types exist, label syntax, Spot
rules) stays with the fake's own checks. A method id names its document by its first part
(``compute.instances.insert`` is in ``compute.v1``; ``iam.roles.get`` in ``iam.v1``).

Strictness, on purpose: fields are looked up by their JSON (lowerCamel) names, the ones every
Google client sends; int32 and uint32 values must be JSON numbers, while int64 and uint64 values
may also be strings of digits (the clients send them so). Output-only fields are accepted, as
the API ignores them, and JSON null stands for a field's default, as in proto3 JSON.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

PACKAGE = "googleapiclient"
DOCUMENTS = ("discovery_cache", "documents")
COMPUTE = "compute.v1"
# Each API a fake serves, by the first part of its method ids: the document's version, and the
# proto package its messages' type URLs name (in Google's 400 messages).
VERSIONS = {"compute": "v1", "serviceusage": "v1", "cloudresourcemanager": "v3", "iam": "v1",
            "storage": "v1", "oauth2": "v2"}
PROTO_PACKAGES = {"compute": "google.cloud.compute.v1", "serviceusage": "google.api.serviceusage.v1",
                  "cloudresourcemanager": "google.cloud.resourcemanager.v3",
                  "iam": "google.iam.admin.v1", "storage": "google.storage.v1",
                  "oauth2": "google.oauth2.v2"}
TYPE_PREFIX = "type.googleapis.com/google.cloud.compute.v1."
# proto scalar type -> the whole numbers it holds
_RANGES = {"TYPE_INT32": (-2**31, 2**31 - 1), "TYPE_UINT32": (0, 2**32 - 1),
           "TYPE_INT64": (-2**63, 2**63 - 1), "TYPE_UINT64": (0, 2**64 - 1)}
# (discovery type, format) -> proto scalar type; other string formats (dates) are plain strings
_SCALAR_TYPES = {("string", None): "TYPE_STRING", ("string", "byte"): "TYPE_BYTES",
                 ("string", "int64"): "TYPE_INT64", ("string", "uint64"): "TYPE_UINT64",
                 ("integer", None): "TYPE_INT32", ("integer", "int32"): "TYPE_INT32",
                 ("integer", "uint32"): "TYPE_UINT32", ("number", None): "TYPE_DOUBLE",
                 ("number", "double"): "TYPE_DOUBLE", ("number", "float"): "TYPE_FLOAT",
                 ("boolean", None): "TYPE_BOOL"}
_DIGITS = re.compile(r"-?[0-9]+")


# -- the document --------------------------------------------------------------------------------
@functools.cache
def document(name: str = COMPUTE) -> dict:
    """A discovery document (``compute.v1``, ``iam.v1``, ...), read once from the installed
    wheel: never fetched, so that the tests run offline and the pinned version fixes what is
    checked."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the fake Google APIs check requests against the discovery "
                           "documents of google-api-python-client, which is not installed; "
                           "fix: pip install -e '.[emulator]'")
    path = Path(next(iter(spec.submodule_search_locations)), *DOCUMENTS, f"{name}.json")
    return json.loads(path.read_text(encoding="utf-8"))


def document_of(method_id: str) -> str:
    """The document that describes ``method_id``: ``iam.roles.get`` -> ``iam.v1``."""
    api = method_id.split(".", 1)[0]
    return f"{api}.{VERSIONS[api]}"


@functools.cache
def _methods(name: str) -> dict[str, dict]:
    """Every method of a document by its id (``compute.instances.insert``)."""
    doc = document(name)
    found: dict[str, dict] = {m["id"]: m for m in doc.get("methods", {}).values()}
    pending = list(doc.get("resources", {}).values())
    while pending:
        resource = pending.pop()
        found.update((m["id"], m) for m in resource.get("methods", {}).values())
        pending.extend(resource.get("resources", {}).values())
    return found


def method(method_id: str) -> dict:
    """The document's description of one method; KeyError names an id it does not have."""
    return _methods(document_of(method_id))[method_id]


# -- the checks ----------------------------------------------------------------------------------
def check_request(method_id: str, path_params: Mapping[str, str], query: Mapping[str, str],
                  body: Any) -> list[str]:
    """Every problem of one request, path first, then query, then body; [] when it is valid."""
    return (check_path(method_id, path_params) + check_query(method_id, query)
            + check_body(method_id, body))


def check_path(method_id: str, params: Mapping[str, str]) -> list[str]:
    """Path parameters that do not match their pattern (an instance name with a capital)."""
    specs = method(method_id).get("parameters", {})
    return [f"Invalid value for field '{name}': '{value}'. Must be a match of regex "
            f"'{specs[name]['pattern']}'"
            for name, value in params.items()
            if "pattern" in specs[name] and not re.fullmatch(specs[name]["pattern"], value)]


def check_query(method_id: str, query: Mapping[str, str]) -> list[str]:
    """Query parameters the method does not take (its own or the API's system parameters),
    and values that do not parse as their type, enum or range."""
    known = {**document(document_of(method_id)).get("parameters", {}),
             **method(method_id).get("parameters", {})}
    problems: list[str] = []
    for name, text in query.items():
        spec = known.get(name)
        if spec is None or spec["location"] != "query":
            problems.append(f'Invalid JSON payload received. Unknown name "{name}": Cannot bind '
                            f"query parameter. Field '{name}' could not be found in request "
                            "message.")
            continue
        problems += _check_scalar(spec, _from_query(spec, text),
                                  _At("", "", name, api=_api(method_id)))
    return problems


def check_body(method_id: str, body: Any) -> list[str]:
    """The body against the method's request schema, recursively. A method without a request
    schema, or a request without a body, has nothing to check here."""
    request = method(method_id).get("request")
    if request is None or body is None:
        return []
    if not isinstance(body, dict):
        return ['Invalid JSON payload received. Unknown name "": Root element must be a message.']
    ref, api = request["$ref"], _api(method_id)
    return _check_fields(_schema(ref, api), body, f"{_snake(ref)}_resource", ref, api)


# -- values --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _At:
    """Where a value sits: the proto path of the message holding it, that message's type (for
    enum type names) and the field's JSON name; ``index`` is ``[2]`` in a list, ``[2].value`` in
    a map (proto map entries)."""

    parent: str
    owner: str
    key: str
    index: str = ""
    api: str = "compute"  # the first part of the method ids: which document, which types

    @property
    def path(self) -> str:
        name = f"{self.parent}.{_snake(self.key)}" if self.parent else _snake(self.key)
        return name + self.index

    def entry(self, index: str) -> _At:
        return replace(self, index=index)


def _check(schema: dict, value: Any, at: _At) -> list[str]:
    """The problems of one JSON value against its schema."""
    if value is None or schema.get("type") == "any":
        return []
    if schema.get("type") == "array":
        return _check_list(schema["items"], value, at)
    if isinstance(value, list) and "additionalProperties" not in schema:
        return [f'Invalid JSON payload received. Unknown name "{at.key}" at \'{at.parent}\': '
                "Proto field is not repeating, cannot start list."]
    if "$ref" in schema or schema.get("type") == "object":
        return _check_object(schema, value, at)
    return _check_scalar(schema, value, at)


def _check_list(items: dict, value: Any, at: _At) -> list[str]:
    if not isinstance(value, list):
        return [_invalid(at, _type_name(items, at), value)]
    return [problem for index, item in enumerate(value)
            for problem in _check(items, item, at.entry(f"[{index}]"))]


def _check_object(schema: dict, value: Any, at: _At) -> list[str]:
    """A message (by ``$ref`` or inline), a map (``additionalProperties``) or a free-form
    object (neither: any object goes)."""
    spec = _schema(schema["$ref"], at.api) if "$ref" in schema else schema
    if not isinstance(value, dict):
        return [_invalid(at, _type_name(schema, at), value)]
    if "additionalProperties" in spec:
        return [problem for index, item in enumerate(value.values())
                for problem in _check(spec["additionalProperties"], item,
                                      at.entry(f"[{index}].value"))]
    if "$ref" not in schema and "properties" not in spec:
        return []
    return _check_fields(spec, value, at.path, schema.get("$ref") or _nested_type(at), at.api)


def _check_fields(spec: dict, value: dict, path: str, owner: str,
                  api: str = "compute") -> list[str]:
    """Each field of a message: known by its JSON name, and a valid value of its schema."""
    properties = spec.get("properties", {})
    problems: list[str] = []
    for key, item in value.items():
        if key not in properties:
            problems.append(f'Invalid JSON payload received. Unknown name "{key}" at '
                            f"'{path}': Cannot find field.")
        else:
            problems += _check(properties[key], item, _At(path, owner, key, api=api))
    return problems


def _check_scalar(schema: dict, value: Any, at: _At) -> list[str]:
    """A string, number or boolean: its JSON type, its enum, the range of its integer type and
    the document's minimum and maximum."""
    if "enum" in schema:
        return [] if value in schema["enum"] else [_invalid(at, _enum_type(at), value)]
    proto_type = _scalar_type(schema)
    if not _fits(proto_type, value):
        return [_invalid(at, proto_type, value)]
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and float(value) < float(low):
        return [f"Invalid value for field '{at.key}': '{value}'. Must be greater than or equal "
                f"to {low}"]
    if high is not None and float(value) > float(high):
        return [f"Invalid value for field '{at.key}': '{value}'. Must be less than or equal "
                f"to {high}"]
    return []


def _fits(proto_type: str, value: Any) -> bool:
    """Does this JSON value parse as ``proto_type``?"""
    if proto_type in ("TYPE_STRING", "TYPE_BYTES"):
        return isinstance(value, str)
    if proto_type == "TYPE_BOOL":
        return isinstance(value, bool)
    if proto_type in ("TYPE_FLOAT", "TYPE_DOUBLE"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    number = _whole(value, strings=proto_type in ("TYPE_INT64", "TYPE_UINT64"))
    low, high = _RANGES[proto_type]
    return number is not None and low <= number <= high


def _whole(value: Any, strings: bool) -> int | None:
    """The whole number a JSON value stands for (a string of digits only if ``strings``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if strings and isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return None


def _from_query(spec: dict, text: str) -> Any:
    """A query parameter's text as the JSON value it stands for, so that one check serves
    query and body: digits become an integer, true and false booleans; anything else stays a
    string, which then fails the check of a number or a boolean."""
    if spec["type"] == "integer" and _DIGITS.fullmatch(text):
        return int(text)
    if spec["type"] == "boolean" and text in ("true", "false"):
        return text == "true"
    return text


# -- names ----------------------------------------------------------------------------------------
def _api(method_id: str) -> str:
    return method_id.split(".", 1)[0]


def _schema(ref: str, api: str = "compute") -> dict:
    return document(f"{api}.{VERSIONS[api]}")["schemas"][ref]


def _prefix(at: _At) -> str:
    """The type URL prefix of the messages of ``at``'s API."""
    return TYPE_PREFIX if at.api == "compute" else \
        f"type.googleapis.com/{PROTO_PACKAGES[at.api]}."


def _snake(name: str) -> str:
    """A JSON field name as its proto name: ``provisioningModel`` -> ``provisioning_model``."""
    return re.sub(r"(?<=.)([A-Z])", r"_\1", name).lower()


def _pascal(name: str) -> str:
    return name[:1].upper() + name[1:]


def _nested_type(at: _At) -> str:
    """The type of an inline message or enum: nested in its owner, named for its field."""
    return f"{at.owner}.{_pascal(at.key)}"


def _enum_type(at: _At) -> str:
    """An enum's type URL; a query parameter's enum has no message to name: ``TYPE_ENUM``."""
    return _prefix(at) + _nested_type(at) if at.owner else "TYPE_ENUM"


def _scalar_type(schema: dict) -> str:
    kind = schema.get("type")
    return _SCALAR_TYPES.get((kind, schema.get("format"))) or _SCALAR_TYPES[(kind, None)]


def _type_name(schema: dict, at: _At) -> str:
    """What a value of ``schema`` parses as, named as Google's messages name it."""
    if "$ref" in schema:
        return _prefix(at) + schema["$ref"]
    if "additionalProperties" in schema:
        return _prefix(at) + _nested_type(at) + "Entry"
    if schema.get("type") == "object":
        return _prefix(at) + _nested_type(at)
    return _enum_type(at) if "enum" in schema else _scalar_type(schema)


def _invalid(at: _At, type_name: str, value: Any) -> str:
    return f"Invalid value at '{at.path}' ({type_name}), {json.dumps(value)}"
