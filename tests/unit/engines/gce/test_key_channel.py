"""The coordinator's side of the GCE key channel (engines/gce/key_channel.py): a worker's key
goes only to a request whose identity token Google signed for that VM, this run's bucket and
the request's own public key. Tokens are minted by the emulator's issuer; google-auth's own
``verify_token`` checks them against its certificates, handed over at the HTTP boundary (a
transport that answers the certificates URL as Google's does)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from expo_executor.coordinator.channel import Channel
from expo_executor.coordinator.vms import Vm
from expo_executor.core.scheduler import Pool
from expo_executor.emulator.identity import CertsTransport, IdentityIssuer
from expo_executor.engines.gce.key_channel import KeyGrantor, KeyRefused, audience
from expo_executor.protocol import worker_keys
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import key_grant_key, key_request_key

RUN_KEY = b"r" * 32
URL = "gs://bucket/wf/.expocloud/run1"
CERTS = "http://certs.invalid/oauth2/v1/certs"
ISSUER = IdentityIssuer()  # one RSA key for the module: making one costs ~0.1 s
VM = dict(project="proj", zone="europe-west1-b", name="expo-run1-w1", instance_id=7,
          service_account="worker@proj.iam.gserviceaccount.com")


def _grantor(issuer: IdentityIssuer = ISSUER) -> tuple[KeyGrantor, CertsTransport]:
    certs = issuer.transport(CERTS)
    return KeyGrantor(RUN_KEY, "proj", URL, lambda name: "europe-west1-b", CERTS, certs), certs


def _request(public: bytes, token: str, worker: str = "expo-run1-w1") -> bytes:
    return json.dumps({"v": 1, "worker": worker, "public": base64.b64encode(public).decode(),
                       "token": token}).encode()


def test_a_genuine_request_gets_the_workers_own_key_encrypted_to_it() -> None:
    grantor, certs = _grantor()
    private, public = worker_keys.new_key_pair()
    token = ISSUER.token(audience(URL, public), **VM)
    answer = grantor.answer("expo-run1-w1", _request(public, token))
    assert worker_keys.worker_key(RUN_KEY, "expo-run1-w1") not in answer
    key = worker_keys.open_grant(answer, "expo-run1-w1", private,
                                 worker_keys.grant_verify_key(RUN_KEY))
    assert key == worker_keys.worker_key(RUN_KEY, "expo-run1-w1")
    grantor.answer("expo-run1-w1", _request(public, token))
    assert certs.fetches == 1  # the certificates are kept a while


@pytest.mark.parametrize("change,error", [
    ({"name": "expo-run1-w2"}, "instance_name"),  # another VM's token
    ({"project": "other"}, "project_id"),
    ({"zone": "us-central1-a"}, "zone"),
    ({"full": False}, "project_id None"),  # no instance claims at all
])
def test_a_token_for_another_instance_project_or_zone_is_refused(change: dict,
                                                                  error: str) -> None:
    grantor, _ = _grantor()
    _, public = worker_keys.new_key_pair()
    token = ISSUER.token(audience(URL, public), **{**VM, **change})
    with pytest.raises(KeyRefused, match=error):
        grantor.answer("expo-run1-w1", _request(public, token))


def test_a_copied_token_with_another_public_key_or_for_another_run_is_refused() -> None:
    """A bucket reader copies a genuine request's token and puts in a public key of its own:
    the token's audience names the genuine key's digest (and the run), so it does not verify."""
    grantor, _ = _grantor()
    _, genuine = worker_keys.new_key_pair()
    _, mine = worker_keys.new_key_pair()
    token = ISSUER.token(audience(URL, genuine), **VM)
    with pytest.raises(KeyRefused, match="does not verify"):
        grantor.answer("expo-run1-w1", _request(mine, token))
    other_run = ISSUER.token(audience("gs://bucket/wf/.expocloud/run2", mine), **VM)
    with pytest.raises(KeyRefused, match="does not verify"):
        grantor.answer("expo-run1-w1", _request(mine, other_run))


def test_a_token_with_a_bad_signature_or_expired_is_refused() -> None:
    grantor, certs = _grantor()
    _, public = worker_keys.new_key_pair()
    wanted = audience(URL, public)
    forged = IdentityIssuer().token(wanted, **VM)  # same key id, another key: not Google's
    with pytest.raises(KeyRefused, match="does not verify"):
        grantor.answer("expo-run1-w1", _request(public, forged))
    assert certs.fetches == 1  # fetched afresh once for a miss, not more
    old = ISSUER.token(wanted, **VM, now=time.time() - 2 * 3600)
    with pytest.raises(KeyRefused, match="does not verify"):
        grantor.answer("expo-run1-w1", _request(public, old))
    token = ISSUER.token(wanted, **VM)
    for data in (b"{", _request(public, token, worker="expo-run1-w2"),
                 _request(public[:16], token)):
        with pytest.raises(KeyRefused, match="malformed"):
            grantor.answer("expo-run1-w1", data)


def test_the_channel_answers_a_genuine_request_and_refuses_a_forged_one_in_one_line(
        tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path / "bucket")
    lines: list[str] = []
    grantor, _ = _grantor()
    channel = Channel(bucket, RUN_KEY, lines.append, grantor)
    good, bad = Vm("expo-run1-w1", time.time(), Pool.SPOT), Vm("expo-run1-w2", time.time(),
                                                               Pool.SPOT)
    private, public = worker_keys.new_key_pair()
    bucket.write(key_request_key(good.name),
                 _request(public, ISSUER.token(audience(URL, public), **VM)))
    # w2's request carries w1's token (a bucket reader copied it): refused, no key written
    bucket.write(key_request_key(bad.name), _request(
        public, ISSUER.token(audience(URL, public), **VM), worker=bad.name))
    channel.statuses([good, bad])
    channel.statuses([good, bad])  # a request is answered (or refused) once
    grant = bucket.read(key_grant_key(good.name))
    assert grant is not None and worker_keys.open_grant(
        grant.data, good.name, private, worker_keys.grant_verify_key(RUN_KEY)) \
        == worker_keys.worker_key(RUN_KEY, good.name)
    assert bucket.read(key_grant_key(bad.name)) is None
    refusals = [line for line in lines if "refusing the key request" in line]
    assert len(refusals) == 1 and "expo-run1-w2" in refusals[0] and "\n" not in refusals[0]
    # a second request of w1 (a job on that VM can mint its identity token too): no new key
    _, other = worker_keys.new_key_pair()
    bucket.write(key_request_key(good.name),
                 _request(other, ISSUER.token(audience(URL, other), **VM)))
    before = bucket.read(key_grant_key(good.name)).data
    channel.statuses([good, bad])
    assert bucket.read(key_grant_key(good.name)).data == before
    assert any("expo-run1-w1" in line and "has its key already" in line for line in lines)


def test_a_worker_takes_only_the_grant_signed_for_its_run_and_gives_up_after_its_grace(
        tmp_path: Path) -> None:
    """The worker's side (obtain_key), on a clock of its own: a grant a bucket writer made is
    skipped, the coordinator's is taken; with no answer it gives up after the grace period."""
    from expo_executor.engines.gce.key_channel import obtain_key

    bucket = LocalBucket(tmp_path / "bucket")
    verify = worker_keys.grant_verify_key(RUN_KEY)
    now = [0.0]
    answers = []  # what lands in key.json at each of the worker's waits

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if answers:
            bucket.write(key_grant_key("expo-run1-w1"), answers.pop(0)(bucket))

    def grant_with(run_key: bytes):  # type: ignore[no-untyped-def]
        def make(bucket: LocalBucket) -> bytes:
            request = json.loads(bucket.read(key_request_key("expo-run1-w1")).data)
            return worker_keys.grant(b"K" * 32, "expo-run1-w1",
                                     base64.b64decode(request["public"]), run_key)
        return make

    answers += [grant_with(b"a" * 32), grant_with(RUN_KEY)]  # a forger first
    key = obtain_key(bucket, "expo-run1-w1", URL, verify, lambda aud: ISSUER.token(aud, **VM),
                     give_up_after=60, poll=0.2, slow_poll=5, clock=lambda: now[0], sleep=sleep)
    assert key == b"K" * 32 and not answers
    request = json.loads(bucket.read(key_request_key("expo-run1-w1")).data)
    assert request["worker"] == "expo-run1-w1"  # the token binds this request's public key:
    grantor, _ = _grantor()  # the coordinator would answer it
    grantor.answer("expo-run1-w1", bucket.read(key_request_key("expo-run1-w1")).data)
    now[0] = 0.0
    bucket.delete(key_grant_key("expo-run1-w1"))
    with pytest.raises(TimeoutError, match="within 60 s"):
        obtain_key(bucket, "expo-run1-w1", URL, verify, lambda aud: ISSUER.token(aud, **VM),
                   give_up_after=60, poll=0.2, slow_poll=5, clock=lambda: now[0], sleep=sleep)


def test_a_worker_looks_for_its_grant_soon_after_asking_then_less_and_less_often(
        tmp_path: Path) -> None:
    """The coordinator answers a booting VM within a round (0.25 s while its first VMs boot):
    the worker looks every 0.1 s for 2 s, then at doubling waits up to its slow poll, so
    that a grant written 0.25 s after the request is taken at 0.3 s, not after a 2-s poll."""
    from expo_executor.engines.gce.key_channel import obtain_key

    bucket = LocalBucket(tmp_path / "bucket")
    now, waits = [0.0], []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if now[0] < 0.25 <= now[0] + seconds:  # the coordinator's round answers at 0.25 s
            request = json.loads(bucket.read(key_request_key("expo-run1-w1")).data)
            bucket.write(key_grant_key("expo-run1-w1"), worker_keys.grant(
                b"K" * 32, "expo-run1-w1", base64.b64decode(request["public"]), RUN_KEY))
        now[0] += seconds

    verify = worker_keys.grant_verify_key(RUN_KEY)
    token = lambda aud: ISSUER.token(aud, **VM)  # noqa: E731
    assert obtain_key(bucket, "expo-run1-w1", URL, verify, token, give_up_after=300,
                      poll=2.0, slow_poll=15.0, clock=lambda: now[0], sleep=sleep) == b"K" * 32
    assert waits == [0.1, 0.1, 0.1] and now[0] == pytest.approx(0.3)
    bucket.delete(key_grant_key("expo-run1-w1"))
    waits.clear()
    now[0] = 1.0  # no answer: the looks thin out to one per slow poll
    with pytest.raises(TimeoutError):
        obtain_key(bucket, "expo-run1-w1", URL, verify, token, give_up_after=100, poll=2.0,
                   slow_poll=15.0, clock=lambda: now[0], sleep=sleep)
    assert waits[:26] == [0.1] * 20 + [0.2, 0.4, 0.8, 1.6, 3.2, 6.4]
    assert waits[26] == pytest.approx(12.8) and set(waits[27:]) == {15.0}


def test_a_request_from_a_vm_whose_zone_is_not_known_yet_is_looked_at_again(
        tmp_path: Path) -> None:
    """The zone claim is always checked: a VM whose create answer was lost (its zone known
    only from a later listing) waits a round or two, it is not refused for good."""
    bucket = LocalBucket(tmp_path / "bucket")
    lines: list[str] = []
    zones: dict[str, str] = {}
    grantor = KeyGrantor(RUN_KEY, "proj", URL, zones.get, CERTS, ISSUER.transport(CERTS))
    channel = Channel(bucket, RUN_KEY, lines.append, grantor)
    vm = Vm("expo-run1-w1", time.time(), Pool.SPOT)
    _, public = worker_keys.new_key_pair()
    bucket.write(key_request_key(vm.name),
                 _request(public, ISSUER.token(audience(URL, public), **VM)))
    channel.statuses([vm])
    assert bucket.read(key_grant_key(vm.name)) is None
    assert any("cannot check the key request of expo-run1-w1 yet" in line for line in lines)
    zones[vm.name] = "europe-west1-b"  # a listing found it
    channel.statuses([vm])
    assert bucket.read(key_grant_key(vm.name)) is not None


def test_a_vm_granted_its_key_gets_its_first_jobs_in_that_round(tmp_path: Path) -> None:
    """Its worker says READY right after its key comes: the round that grants the key
    assigns its jobs too, so that they are in its inbox at its first read, not a round
    after its status."""
    from expo_executor.coordinator.key_requests import KeyRequests
    from tests.coordinator_rig import Rig

    rig = Rig(tmp_path)
    grantor, _ = _grantor()
    rig.coordinator.channel.key_requests = KeyRequests(rig.bucket, grantor, rig.lines.append)
    rig.submit("a")
    rig.round()
    name = rig.engine.calls[0][2][0]
    rig.round()
    assert rig.assigned(name) == set(), "no key asked for, no status: still booting"
    _, public = worker_keys.new_key_pair()
    token = ISSUER.token(audience(URL, public), **{**VM, "name": name})
    rig.direct.write(key_request_key(name), _request(public, token, name))
    rig.round()
    assert rig.direct.read(key_grant_key(name)) is not None
    assert rig.assigned(name) == {"a"}
