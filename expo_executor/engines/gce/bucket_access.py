"""Can the workers read and write the run's bucket? Pure: IAM policies (the bucket's, the
project's) and a role reader in, what they grant a member out.

Why: a worker whose service account cannot write the bucket boots, takes its first job and
fails it at the upload (or cannot read its inbox at all); the coordinator's own access is
checked by ``testIamPermissions``, but that answers for the caller only. So the policies are
read and the worker's bindings expanded into permissions. What the workers need is what the
``expocloudStorage`` role of docs/gce.md holds: objects get, list, create and delete, and
``storage.buckets.get`` (Snakemake's GCS storage plugin checks the bucket exists).
``roles/storage.objectAdmin`` alone lacks the last one.

A binding counts when it names the member, ``allUsers`` or ``allAuthenticatedUsers``
(conditions are not evaluated: a conditional binding counts as granting). Groups and domains
cannot be expanded from here: their roles are reported as maybe granting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

WORKER_NEEDS = ("storage.objects.get", "storage.objects.list", "storage.objects.create",
                "storage.objects.delete", "storage.buckets.get")
_ALL = ("allUsers", "allAuthenticatedUsers")
_INDIRECT = ("group:", "domain:", "principalSet:")
# The predefined storage roles' share of WORKER_NEEDS (IAM roles reference), used when reading a
# predefined role is refused.
KNOWN_ROLES: Mapping[str, tuple[str, ...]] = {
    "roles/storage.admin": WORKER_NEEDS,
    "roles/storage.objectAdmin": WORKER_NEEDS[:4],
    "roles/storage.objectUser": WORKER_NEEDS[:4],
    "roles/storage.objectViewer": WORKER_NEEDS[:2],
    "roles/storage.objectCreator": ("storage.objects.create",),
    "roles/storage.legacyBucketOwner": WORKER_NEEDS[1:],
    "roles/storage.legacyBucketWriter": WORKER_NEEDS[1:],
    "roles/storage.legacyBucketReader": ("storage.objects.list", "storage.buckets.get"),
    "roles/storage.legacyObjectOwner": ("storage.objects.get",),
    "roles/storage.legacyObjectReader": ("storage.objects.get",),
}


@dataclass(frozen=True)
class Grants:
    """What the policies give a member of ``WORKER_NEEDS``: the roles bound to it, the
    permissions they hold, the roles whose permissions could not be read, and the roles held by
    groups or domains it may belong to."""

    roles: tuple[str, ...]
    granted: frozenset[str]
    unresolved: tuple[str, ...] = ()
    indirect: tuple[str, ...] = ()

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(p for p in WORKER_NEEDS if p not in self.granted)


def bound_roles(policies: Iterable[Mapping], member: str) -> tuple[list[str], list[str]]:
    """(roles bound to ``member`` or to everyone, roles bound to groups and domains)."""
    direct: list[str] = []
    indirect: list[str] = []
    for policy in policies:
        for binding in policy.get("bindings") or []:
            members = binding.get("members") or []
            role = str(binding.get("role", ""))
            if member in members or any(m in members for m in _ALL):
                direct.append(role)
            elif any(str(m).startswith(_INDIRECT) for m in members):
                indirect.append(role)
    return sorted(set(direct)), sorted(set(indirect))


def grants(policies: Iterable[Mapping], member: str,
           permissions_of: Callable[[str], Iterable[str] | None]) -> Grants:
    """What ``policies`` give ``member``; ``permissions_of(role)`` reads a role (None: it
    could not be read)."""
    policies = list(policies)
    direct, indirect = bound_roles(policies, member)
    granted: set[str] = set()
    unresolved = []
    for role in direct:
        permissions = permissions_of(role)
        if permissions is None:
            unresolved.append(role)
            continue
        granted |= set(permissions) & set(WORKER_NEEDS)
    return Grants(tuple(direct), frozenset(granted), tuple(unresolved), tuple(indirect))
