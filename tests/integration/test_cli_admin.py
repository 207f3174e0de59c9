"""``awa job``, ``awa queue`` and ``awa dlq`` against a real, migrated database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

import awa
from awa.entrypoints.cli import cli
from tests.fixtures.processes import live_runtimes, spawn_worker, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(migrated_database_url: str) -> Iterator[str]:
    result = CliRunner().invoke(cli, ["--database-url", migrated_database_url, "migrate"])
    assert result.exit_code == 0, result.stderr
    yield migrated_database_url


def awa_cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", url, *args], env={"DATABASE_URL": None})


def seed(url: str) -> list[int]:
    """Three ``send_email`` jobs in ``mail`` and one ``report`` in ``default``."""
    with awa.Client(url) as client:
        ids = [client.insert({"n": i}, kind="send_email", queue="mail").id for i in range(3)]
        ids.append(client.insert({"n": 9}, kind="report", tags=["nightly"]).id)
    return ids


def mark_failed(url: str, *ids: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.canonical_jobs SET state = 'failed', finalized_at = now() "
            "WHERE id = ANY(%s)",
            (list(ids),),
        )


def job_state(url: str, job_id: int) -> str:
    with awa.Client(url) as client:
        return str(client.get_job(job_id).state)


def test_job_list_table_and_json(url: str) -> None:
    ids = seed(url)
    table = awa_cli(url, "job", "list")
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ID", "KIND", "QUEUE", "STATE", "ATT", "MAX"]
    assert len(lines) == 5
    assert lines[1].split() == [str(ids[3]), "report", "default", "available", "0", "25"]
    assert lines[0].index("KIND") == lines[1].index("report")

    filtered = awa_cli(url, "job", "list", "--queue", "mail", "--limit", "2", "--json")
    rows = json.loads(filtered.stdout)
    assert [r["queue"] for r in rows] == ["mail", "mail"]
    assert len(rows) == 2
    by_kind = json.loads(awa_cli(url, "--json", "job", "list", "--kind", "report").stdout)
    assert [r["id"] for r in by_kind] == [ids[3]]
    assert awa_cli(url, "job", "list", "--state", "nope").exit_code == 2


def test_job_dump_and_dump_run(url: str) -> None:
    job_id = seed(url)[0]
    dump = awa_cli(url, "job", "dump", str(job_id))
    assert dump.exit_code == 0, dump.stderr
    doc = json.loads(dump.stdout)
    assert doc["job"]["id"] == job_id
    assert "timeline" in doc
    run = json.loads(awa_cli(url, "job", "dump-run", str(job_id)).stdout)
    assert run["job_id"] == job_id
    assert run["source"] == "current_job_row"
    bad_attempt = awa_cli(url, "job", "dump-run", str(job_id), "--attempt", "7")
    assert bad_attempt.exit_code == 1
    assert bad_attempt.stderr.strip().splitlines()[-1].startswith("awa: error: attempt")


def test_job_cancel_then_retry(url: str) -> None:
    job_id = seed(url)[0]
    cancelled = awa_cli(url, "job", "cancel", str(job_id))
    assert cancelled.exit_code == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"Cancelled job {job_id}"
    assert job_state(url, job_id) == "cancelled"
    retried = awa_cli(url, "job", "retry", str(job_id))
    assert retried.exit_code == 0, retried.stderr
    assert retried.stdout.strip() == f"Retried job {job_id}"
    assert job_state(url, job_id) == "available"


def test_bad_job_id_is_one_line_exit_1(url: str) -> None:
    for command in ("dump", "retry", "cancel"):
        result = awa_cli(url, "job", command, "987654")
        assert result.exit_code == 1
        lines = result.stderr.strip().splitlines()
        assert lines[-1] == "awa: error: job not found: 987654"
        assert "Traceback" not in result.stderr
        assert result.stdout == ""
    assert awa_cli(url, "job", "dump", "not-a-number").exit_code == 2


def test_retry_failed_and_discard(url: str) -> None:
    ids = seed(url)
    mark_failed(url, ids[0], ids[1], ids[3])
    assert awa_cli(url, "job", "retry-failed").exit_code == 2
    both = awa_cli(url, "job", "retry-failed", "--kind", "a", "--queue", "b")
    assert both.exit_code == 2
    retried = awa_cli(url, "job", "retry-failed", "--queue", "mail")
    assert retried.exit_code == 0, retried.stderr
    assert "Retried 2 failed job(s) of queue mail" in retried.stdout
    assert job_state(url, ids[0]) == "available"
    discarded = awa_cli(url, "job", "discard", "--kind", "report")
    assert discarded.stdout.strip() == "Discarded 1 failed job(s) of kind report"
    assert awa_cli(url, "job", "dump", str(ids[3])).exit_code == 1


def queue_row(url: str, name: str) -> dict[str, object]:
    result = awa_cli(url, "queue", "stats", "--json")
    assert result.exit_code == 0, result.stderr
    (row,) = [r for r in json.loads(result.stdout) if r["queue"] == name]
    return dict(row)


def test_queue_pause_resume_stats(url: str) -> None:
    seed(url)
    paused = awa_cli(url, "queue", "pause", "mail", "--by", "ops")
    assert paused.exit_code == 0, paused.stderr
    assert paused.stdout.strip() == "Paused queue mail"
    row = queue_row(url, "mail")
    assert row["paused"] is True
    assert row["available"] == 3
    assert queue_row(url, "default")["paused"] is False

    table = awa_cli(url, "queue", "stats")
    header = table.stdout.splitlines()[0].split()
    assert header == [
        "QUEUE",
        "AVAIL",
        "RUNNING",
        "FAILED",
        "COMPLETED/1H",
        "LAG(s)",
        "PAUSED",
        "SERVED",
    ]
    mail_line = next(line for line in table.stdout.splitlines() if line.startswith("mail"))
    assert mail_line.split()[-2:] == ["yes", "NO"]
    hidden = json.loads(awa_cli(url, "--json", "queue-stats").stdout)
    visible = json.loads(awa_cli(url, "--json", "queue", "stats").stdout)
    for rows in (hidden, visible):
        for row in rows:
            row.pop("lag_seconds")
    assert hidden == visible

    resumed = awa_cli(url, "queue", "resume", "mail")
    assert resumed.stdout.strip() == "Resumed queue mail"
    assert queue_row(url, "mail")["paused"] is False

    drained = awa_cli(url, "queue", "drain", "mail")
    assert drained.stdout.strip() == "Drained 3 job(s) from queue mail"
    assert queue_row(url, "mail")["available"] == 0


def test_dlq_bulk_without_filter_is_refused(url: str) -> None:
    for args in (("retry-bulk",), ("retry-all",), ("move",), ("purge",)):
        result = awa_cli(url, "dlq", *args)
        assert result.exit_code == 1, args
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("awa: error:")
        assert "--all" in last
        assert "Traceback" not in result.stderr


def test_dlq_move_list_cursor_depth_retry_purge(url: str) -> None:
    ids = seed(url)
    mark_failed(url, *ids)
    moved = awa_cli(url, "dlq", "move", "--queue", "mail", "--reason", "poison")
    assert moved.stdout.strip() == "Moved 3 failed job(s) to the dead-letter queue"
    one = awa_cli(url, "dlq", "move", str(ids[3]))
    assert one.stdout.strip() == f"Moved job {ids[3]} to the dead-letter queue"

    depth = json.loads(awa_cli(url, "dlq", "depth", "--json").stdout)
    assert depth["total"] == 4
    assert depth["by_queue"] == {"mail": 3, "default": 1}
    assert awa_cli(url, "dlq", "depth", "--queue", "mail").stdout.strip() == "mail: 3"

    seen: list[int] = []
    page = json.loads(awa_cli(url, "dlq", "list", "--limit", "3", "--json").stdout)
    seen += [e["job"]["id"] for e in page["entries"]]
    cursor = page["next_cursor"]
    assert cursor is not None
    rest = awa_cli(
        url,
        "dlq",
        "list",
        "--limit",
        "3",
        "--before-id",
        str(cursor["before_id"]),
        "--before-dlq-at",
        cursor["before_dlq_at"],
        "--json",
    )
    page2 = json.loads(rest.stdout)
    seen += [e["job"]["id"] for e in page2["entries"]]
    assert page2["next_cursor"] is None
    assert sorted(seen) == sorted(ids)
    text = awa_cli(url, "dlq", "list", "--limit", "1")
    assert "Next page: --before-dlq-at" in text.stdout
    assert awa_cli(url, "dlq", "list", "--before-dlq-at", "yesterday").exit_code == 2

    retried = awa_cli(url, "dlq", "retry", str(ids[0]), "--queue", "rescued")
    assert retried.exit_code == 0, retried.stderr
    assert job_state(url, ids[0]) == "available"
    assert awa_cli(url, "dlq", "retry", str(ids[0])).exit_code == 1
    bulk = awa_cli(url, "dlq", "retry-bulk", "--kind", "report")
    assert bulk.stdout.strip() == "Retried 1 job(s) from the dead-letter queue"
    purged_one = awa_cli(url, "dlq", "purge", str(ids[1]))
    assert purged_one.stdout.strip() == f"Purged job {ids[1]} from the dead-letter queue"
    purged = awa_cli(url, "dlq", "purge", "--all")
    assert purged.stdout.strip() == "Purged 1 job(s) from the dead-letter queue"
    assert json.loads(awa_cli(url, "--json", "dlq", "depth").stdout)["total"] == 0


def test_job_list_and_dump_skip_a_row_python_cannot_read(url: str) -> None:
    ids = seed(url)
    with psycopg.connect(url) as conn:
        # A row as a release without the run_at check could have left it.
        conn.execute("ALTER TABLE awa.canonical_jobs DISABLE TRIGGER canonical_jobs_run_at_update")
        conn.execute("UPDATE awa.canonical_jobs SET run_at = '-infinity' WHERE id = %s", (ids[0],))
        conn.execute("ALTER TABLE awa.canonical_jobs ENABLE TRIGGER canonical_jobs_run_at_update")
    listed = awa_cli(url, "job", "list")
    assert listed.exit_code == 0, listed.stderr
    shown = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert sorted(shown) == sorted(str(i) for i in ids[1:])
    dumped = awa_cli(url, "job", "dump", str(ids[1]))
    assert dumped.exit_code == 0, dumped.stderr
    assert json.loads(dumped.stdout)["job"]["id"] == ids[1]
    missing = awa_cli(url, "job", "dump", str(ids[0]))
    assert missing.exit_code != 0


def test_queue_stats_flags_queues_no_live_worker_serves(url: str, tmp_path: Path) -> None:
    seed(url)
    stranded = awa_cli(url, "queue", "stats")
    assert "no live worker serves queue(s) default (1 waiting), mail (3 waiting)" in (
        stranded.stderr
    )
    worker = spawn_worker(url, tmp_path, "-q", "mail:1", module="tests.fixtures.worker_app")
    try:
        wait_for(lambda: live_runtimes(url), 20, "the worker's runtime row")
        wait_for(lambda: queue_row(url, "mail")["served"] is True, 10, "mail served")
        rest = awa_cli(url, "queue", "stats")
        assert "default (1 waiting)" in rest.stderr
        assert "mail (" not in rest.stderr
    finally:
        worker.stop()


def test_job_enqueue(url: str) -> None:
    made = awa_cli(
        url,
        "job",
        "enqueue",
        "send_email",
        "--queue",
        "mail",
        "--args",
        '{"to": "ada@example.com"}',
        "--priority",
        "1",
        "--tag",
        "cli",
        "--metadata",
        '{"by": "ops"}',
    )
    assert made.exit_code == 0, made.output
    assert made.stdout.startswith(
        "Enqueued job "
    ) and "(kind send_email, queue mail, available)" in (made.stdout)
    later = awa_cli(url, "job", "enqueue", "report", "--run-at", "+5m", "--json")
    row = json.loads(later.stdout)
    assert row["state"] == "scheduled" and row["queue"] == "default" and row["args"] == {}
    at = awa_cli(url, "job", "enqueue", "report", "--run-at", "2099-01-01T00:00:00Z", "--json")
    assert json.loads(at.stdout)["run_at"].startswith("2099-01-01T00:00:00")
    with awa.Client(url) as client:
        (job,) = client.list_jobs(kind="send_email")
        assert job.args == {"to": "ada@example.com"} and job.priority == 1
        assert job.tags == ["cli"] and job.metadata == {"by": "ops"}
    for bad, message in (
        (["--args", "{oops"], "not valid JSON"),
        (["--args", "[1]"], "must be a JSON object"),
        (["--run-at", "soon"], "not an ISO-8601 timestamp"),
        (["--priority", "9"], "9 is not in the range"),
    ):
        refused = awa_cli(url, "job", "enqueue", "k", *bad)
        assert refused.exit_code == 2 and message in refused.stderr, refused.output
    assert awa_cli(url, "job", "enqueue", "k", "--queue", "").exit_code == 1


def test_job_insert_with_a_concurrency_key_and_conflict_modes(url: str) -> None:
    def insert(*args: str) -> dict[str, object]:
        made = awa_cli(url, "job", "insert", "sync", "--json", *args)
        assert made.exit_code == 0, made.output
        row: dict[str, object] = json.loads(made.stdout)
        return row

    unique = ("--unique-opts", '{"by_args": false}')
    first = insert("--args", '{"n": 1}', "--concurrency-key", "tenant-42", *unique)
    assert first["insert_outcome"] == "inserted"
    assert first["metadata"] == {"awa:concurrency_key": "tenant-42"}
    replaced = insert("--args", '{"n": 2}', *unique, "--on-conflict", "replace")
    assert (replaced["id"], replaced["insert_outcome"]) == (first["id"], "replaced")
    assert replaced["args"] == {"n": 2}
    skipped = insert("--args", '{"n": 3}', *unique, "--on-conflict", "skip")
    assert skipped["insert_outcome"] == "skipped"
    plain = awa_cli(url, "job", "enqueue", "sync", *unique)
    assert plain.exit_code == 0 and plain.stdout.startswith("Skipped: "), plain.output
    debounce = ("--on-conflict", "debounce", "--debounce", "30s", "--max-wait", "5m")
    held = awa_cli(url, "job", "insert", "digest", *debounce)
    assert held.exit_code == 0 and held.stdout.startswith("Enqueued job "), held.output
    again = awa_cli(url, "job", "insert", "digest", *debounce)
    assert again.exit_code == 0 and again.stdout.startswith("Debounced into waiting job ")
    with awa.Client(url) as client:
        (job,) = client.list_jobs(kind="sync")
        assert job.args == {"n": 2}
        (digest,) = client.list_jobs(kind="digest")
        assert digest.state == awa.JobState.Scheduled
    for bad, message in (
        (("--on-conflict", "debounce"), "needs --debounce"),
        (("--debounce", "30s"), "go with --on-conflict debounce"),
        (("--on-conflict", "later"), "'later' is not one of"),
    ):
        refused = awa_cli(url, "job", "insert", "k", *bad)
        assert refused.exit_code == 2 and message in refused.stderr, refused.output
    no_max = awa_cli(url, "job", "insert", "k", "--on-conflict", "debounce", "--debounce", "5s")
    assert no_max.exit_code == 1 and "unique_opts.on_conflict.max_wait" in no_max.stderr
    empty_key = awa_cli(url, "job", "insert", "k", "--concurrency-key", "")
    assert empty_key.exit_code == 1 and "concurrency_key" in empty_key.stderr
