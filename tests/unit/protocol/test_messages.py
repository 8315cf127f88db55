"""Messages are JSON, schema-checked, bounded, signed with a worker's own key, and every job's
command and environment sealed for its worker."""

from __future__ import annotations

import json

import pytest

from expo_executor.protocol import messages

KEY = b"k" * 32
INBOX = {"seq": 1, "jobs": {"j1a1": {"argv": ["true"], "cwd": "/", "env": {},
                                     "deadline_s": None, "cpus": 1}},
         "cancel": []}


def test_round_trip_signed() -> None:
    assert messages.decode("inbox", messages.encode("inbox", INBOX, KEY), KEY) == INBOX


def test_forged_or_unsigned_assignments_are_rejected() -> None:
    data = messages.encode("inbox", INBOX, b"x" * 32)
    with pytest.raises(messages.MessageError, match="bad signature"):
        messages.decode("inbox", data, KEY)
    with pytest.raises(messages.MessageError, match="bad signature"):
        messages.decode("inbox", messages.encode("inbox", INBOX), KEY)
    tampered = json.loads(messages.encode("inbox", INBOX, KEY))
    tampered["body"]["jobs"]["j1a1"]["argv"] = ["rm", "-rf", "/"]
    with pytest.raises(messages.MessageError, match="bad signature"):
        messages.decode("inbox", json.dumps(tampered).encode(), KEY)


@pytest.mark.parametrize("body,error", [
    ({**INBOX, "seq": "1"}, "wrong type"),
    ({k: v for k, v in INBOX.items() if k != "cancel"}, "missing field"),
    ({**INBOX, "cancel": [1]}, "job keys"),
    ({**INBOX, "jobs": {"j": {**INBOX["jobs"]["j1a1"], "argv": []}}}, "non-empty"),
    ({**INBOX, "jobs": {"j": {**INBOX["jobs"]["j1a1"], "argv": "rm -rf /"}}}, "wrong type"),
])
def test_schema_violations_are_rejected(body: dict, error: str) -> None:
    with pytest.raises(messages.MessageError, match=error):
        messages.encode("inbox", body)


def test_size_bound_and_garbage() -> None:
    with pytest.raises(messages.MessageError, match="exceeds"):
        messages.decode("inbox", b" " * (messages.MAX_BYTES + 1))
    for data in (b"\x80\x04pickle", b"[]", b'{"v": 1, "kind": "inbox", "body": {}}'):
        with pytest.raises(messages.MessageError):
            messages.decode("inbox", data)


def test_an_inbox_names_its_worker_under_the_signature() -> None:
    data = messages.encode("inbox", {**INBOX, "to": "w-1"}, KEY)
    assert messages.decode("inbox", data, KEY)["to"] == "w-1"
    moved = json.loads(data)
    moved["body"]["to"] = "w-2"
    with pytest.raises(messages.MessageError, match="bad signature"):
        messages.decode("inbox", json.dumps(moved).encode(), KEY)
    with pytest.raises(messages.MessageError, match="'to'"):
        messages.encode("inbox", {**INBOX, "to": 2})


def test_sealed_parts_open_only_with_their_run_key_and_job() -> None:
    sealed = messages.seal(["tool", "--password", "hunter2"], {"TOKEN": "t0k"}, KEY, "c1")
    assert "hunter2" not in sealed and "t0k" not in sealed
    assert messages.unseal(sealed, KEY, "c1") == (["tool", "--password", "hunter2"],
                                                 {"TOKEN": "t0k"}, [])
    with_secrets = messages.seal(["tool"], {}, KEY, "c1", ["hunter2", "t0k"])
    assert messages.unseal(with_secrets, KEY, "c1").redact == ["hunter2", "t0k"]
    assert messages.seal(["a"], {}, KEY, "c1") != messages.seal(["a"], {}, KEY, "c1")  # nonces
    for key, job, text in ((b"x" * 32, "c1", sealed), (KEY, "c2", sealed),
                           (KEY, "c1", "not base64!"), (KEY, "c1", sealed[:-8] + "AAAAAAA=")):
        with pytest.raises(messages.MessageError):
            messages.unseal(text, key, job)
    job = {**INBOX["jobs"]["j1a1"], "sealed": 5}
    with pytest.raises(messages.MessageError, match="'sealed'"):
        messages.encode("inbox", {**INBOX, "jobs": {"j": job}})


def test_redaction_blanks_every_secret_longest_first() -> None:
    text = "pw=hunter2 and hunter2x and t0k"
    assert messages.redacted(text, ["hunter2", "hunter2x", ""]) == \
        "pw=******** and ******** and t0k"
    assert messages.redacted(None, ["x"]) is None
    assert messages.redacted("nothing", []) == "nothing"


def test_records_round_trip_through_signed_messages() -> None:
    """The typed records are the only way the package builds or reads these messages."""
    from expo_executor.core.records import AttemptEnd, Outcome, WorkerState
    from expo_executor.protocol.records import Inbox, JobSpec, WorkerResult, WorkerStatus

    inbox = Inbox(3, "w-1", {"j": JobSpec(["true"], None, {"A": "secret"}, 5.0, 2,
                                          {"outdir": "/o"}, redact=("secret",))},
                  ["k"])
    data = inbox.encode(KEY)
    assert b"secret" not in data and b'"true"' not in data  # command and environment sealed
    back = Inbox.decode(data, KEY)
    wire = back.jobs["j"]
    assert wire.argv == messages.SEALED_ARGV and wire.env == {} and wire.redact == ()
    assert (back.seq, back.to, back.cancel) == (inbox.seq, inbox.to, inbox.cancel)
    assert back.jobs["j"].opened(KEY, "j") == inbox.jobs["j"]  # the spec, unchanged
    with pytest.raises(messages.MessageError, match="does not open"):
        back.jobs["j"].opened(b"o" * 32, "j")
    status = WorkerStatus("w-1", 3, 1.5, ["j"], 2, WorkerState.READY, {"read": 4})
    assert WorkerStatus.decode(status.encode(KEY), KEY) == status
    result = WorkerResult("j", "w-1", AttemptEnd.TIMEOUT, None, 1.0, 4.5, "killed", "tail")
    back = WorkerResult.decode(result.encode(KEY), KEY)
    assert back == result and back.runtime_s == 3.5 and back.end.outcome is Outcome.TIMEOUT
    unstarted = WorkerResult("h", "w-1", AttemptEnd.CANCELLED, None, 5.0, 5.0, "held", ran=False)
    assert WorkerResult.decode(unstarted.encode(KEY), KEY) == unstarted
    assert "ran" not in result.to_wire(), "a job that ran says nothing more than before"
    gave_back = WorkerStatus("w-1", 4, 2.0, [], 2, WorkerState.READY, {}, {"h": 3})
    assert WorkerStatus.decode(gave_back.encode(KEY), KEY) == gave_back
    asking = Inbox(7, "w-1", {}, [], {"h": 3})
    assert Inbox.decode(asking.encode(KEY), KEY) == asking
    assert "release" not in messages.decode("inbox", Inbox(8, "w-1").encode(KEY), KEY)
    assert "released" not in messages.decode("status", status.encode(KEY), KEY)
    assert AttemptEnd.CANCELLED.outcome is None and AttemptEnd.PREEMPTED.outcome is None


def test_a_prune_point_travels_typed_and_is_checked_like_the_other_fields() -> None:
    """A job's prune point is a core hardness point on both sides: the wire form is checked
    (family text, scope values text, coordinates finite numbers) before it becomes one."""
    from expo_executor.core.hardness import HardnessPoint
    from expo_executor.protocol.records import Inbox, JobSpec, PrunePoint

    prune = PrunePoint("solve", HardnessPoint(("d1",), (2.0, 5.0)))
    inbox = Inbox(1, "w-1", {"j": JobSpec(["true"], None, {}, 5.0, prune=prune)})
    back = Inbox.decode(inbox.encode(KEY), KEY).jobs["j"].prune
    assert back == prune and isinstance(back.point, HardnessPoint)
    assert Inbox.decode(Inbox(2, "w-1", {"j": JobSpec(["true"], None, {}, None)})
                        .encode(KEY), KEY).jobs["j"].prune is None
    wire = prune.to_wire()
    for bad in ({**wire, "family": 3}, {k: v for k, v in wire.items() if k != "vector"},
                {**wire, "scope": [1]}, {**wire, "vector": ["2"]}, {**wire, "vector": [True]},
                {**wire, "vector": [float("nan")]}, {**wire, "vector": [float("inf")]}, [1]):
        body = {**INBOX, "jobs": {"j": {**INBOX["jobs"]["j1a1"], "prune": bad}}}
        with pytest.raises(messages.MessageError, match="'prune' has the wrong type"):
            messages.check("inbox", body)


@pytest.mark.parametrize("kind,body,error", [
    ("status", {"worker": "w", "seq_seen": 1, "time": 1.0, "running": [], "slots": 1,
                "state": "sleeping"}, "unknown state"),
    ("result", {"key": "j", "worker": "w", "outcome": "ok", "returncode": 0, "started": 1.0,
                "ended": 2.0, "reason": None, "log_tail": ""}, "unknown outcome"),
    ("result", {"key": "j", "worker": "w", "outcome": "cancelled", "returncode": None,
                "started": 1.0, "ended": 2.0, "reason": None, "log_tail": "", "ran": "no"},
     "'ran' has the wrong type"),
    ("inbox", {"seq": 1, "jobs": {}, "cancel": [], "release": ["j"]},
     "'release' must map job keys to request numbers"),
    ("inbox", {"seq": 1, "jobs": {}, "cancel": [], "release": {"j": 0}}, "'release' must map"),
    ("inbox", {"seq": 1, "jobs": {}, "cancel": [], "release": {"j": True}}, "'release' must map"),
    ("status", {"worker": "w", "seq_seen": 1, "time": 1.0, "running": [], "slots": 1,
                "state": "ready", "released": {"j": "3"}}, "'released' must map"),
])
def test_words_outside_the_vocabulary_are_rejected(kind: str, body: dict, error: str) -> None:
    with pytest.raises(messages.MessageError, match=error):
        messages.encode(kind, body)


def test_every_job_of_an_inbox_is_sealed_for_its_worker_only() -> None:
    """Issue 16 C6: a Snakemake job's environment (envvars:, storage secrets) never reaches the
    bucket in the clear, and opens only with the key of the worker the inbox is for."""
    from expo_executor.protocol.records import Inbox, JobSpec
    from expo_executor.protocol.worker_keys import worker_key

    run_key = b"r" * 32
    w1, w2 = worker_key(run_key, "w-1"), worker_key(run_key, "w-2")
    job = JobSpec(["/bin/sh", "-c", "snakemake ..."], None, {"AWS_SECRET": "hunter2-xyz"},
                  None, 1)
    data = Inbox(1, "w-1", {"j": job}).encode(w1)
    assert b"hunter2-xyz" not in data and b"AWS_SECRET" not in data
    assert Inbox.decode(data, w1).jobs["j"].opened(w1, "j").env == {"AWS_SECRET": "hunter2-xyz"}
    for key in (w2, run_key):  # another worker, or the run key itself
        with pytest.raises(messages.MessageError, match="bad signature"):
            Inbox.decode(data, key)


def test_worker_keys_differ_per_worker_and_derive_from_the_run_key_only() -> None:
    from expo_executor.protocol.worker_keys import worker_key

    run_key = b"r" * 32
    assert worker_key(run_key, "w-1") == worker_key(run_key, "w-1")  # a restarted coordinator
    assert len({worker_key(run_key, "w-1"), worker_key(run_key, "w-2"),
                worker_key(b"s" * 32, "w-1"), run_key}) == 4


def test_a_key_grant_opens_only_with_its_key_pair_for_its_worker_signed_by_its_run() -> None:
    """Whoever can write to the bucket sees the worker's public key in its request: a grant of
    a key of their own choosing, encrypted to it, must not be taken (it is not signed with the
    run's grant key, whose public half the worker has from its settings)."""
    from expo_executor.protocol import worker_keys

    run_key = b"r" * 32
    verify = worker_keys.grant_verify_key(run_key)
    private, public = worker_keys.new_key_pair()
    data = worker_keys.grant(b"K" * 32, "w-1", public, run_key)
    assert b"K" * 32 not in data and run_key not in data
    assert worker_keys.open_grant(data, "w-1", private, verify) == b"K" * 32
    other, _ = worker_keys.new_key_pair()
    forged = worker_keys.grant(b"F" * 32, "w-1", public, b"a" * 32)  # the attacker's own
    for worker, key_pair, text, error in (
            ("w-1", other, data, "not signed"), ("w-2", private, data, "not signed"),
            ("w-1", private, data.replace(b'"sealed": "', b'"sealed": "A'), "open"),
            ("w-1", private, b"not json", "open"), ("w-1", private, forged, "not signed")):
        with pytest.raises(messages.MessageError, match=error):
            worker_keys.open_grant(text, worker, key_pair, verify)


def test_a_result_batch_is_signed_once_and_holds_one_workers_results_only() -> None:
    from expo_executor.core.records import AttemptEnd
    from expo_executor.protocol.records import ResultBatch, WorkerResult

    results = tuple(WorkerResult(f"j{n}", "w-1", AttemptEnd.SOLVED, 0, 1.0, 2.0 + n)
                    for n in range(3))
    batch = ResultBatch("w-1", results)
    data = batch.encode(KEY)
    assert json.loads(data)["kind"] == "results" and batch.first == "j0"
    assert ResultBatch.decode(data, KEY) == batch
    with pytest.raises(messages.MessageError, match="bad signature"):
        ResultBatch.decode(data, b"o" * 32)
    # one result is the plain "result" message, as a worker without prefetch writes it
    single = ResultBatch("w-1", results[:1]).encode(KEY)
    assert WorkerResult.decode(single, KEY) == results[0]
    assert ResultBatch.decode(single, KEY) == ResultBatch("w-1", results[:1])
    body = json.loads(data)["body"]
    body["results"][1]["worker"] = "w-2"
    with pytest.raises(messages.MessageError, match="another worker"):
        messages.encode("results", body, KEY)
    with pytest.raises(messages.MessageError, match="empty"):
        messages.encode("results", {"worker": "w-1", "results": []}, KEY)
    with pytest.raises(ValueError, match="one or more results"):
        ResultBatch("w-2", results)


def test_a_results_staged_bytes_travel_typed_and_only_when_something_moved() -> None:
    """The bytes an attempt moved to and from the bucket (its egress, cost/cost_report.py):
    an optional field, absent when nothing moved (as from an older worker), checked."""
    from expo_executor.core.records import AttemptEnd
    from expo_executor.protocol.records import StagedBytes, WorkerResult

    moved = WorkerResult("j", "w-1", AttemptEnd.SOLVED, 0, 1.0, 2.0,
                         staged=StagedBytes(down=3_000, up=500))
    assert WorkerResult.decode(moved.encode(KEY), KEY).staged == StagedBytes(3_000, 500)
    still = WorkerResult("j", "w-1", AttemptEnd.SOLVED, 0, 1.0, 2.0)
    assert "staged" not in still.to_wire()
    assert WorkerResult.decode(still.encode(KEY), KEY).staged == StagedBytes()
    base = still.to_wire()
    for bad, error in (({"down": 1}, "missing field 'up'"), ({"down": "1", "up": 0}, "wrong type"),
                       ({"down": True, "up": 0}, "wrong type"), ([1, 2], "not an object"),
                       ({"down": -1, "up": 0}, "negative bytes")):
        with pytest.raises(messages.MessageError, match=error):
            messages.check("result", {**base, "staged": bad})
