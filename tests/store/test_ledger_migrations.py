"""The ledger's schema through Alembic: new databases, ledgers from before migrations, races."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from nightshift.budgets import snapshots as snapshots_module
from nightshift.store import alert_log as alert_log_module
from nightshift.store import cancel_requests as cancel_requests_module
from nightshift.store import forecasts as forecasts_module
from nightshift.store import lease as lease_module
from nightshift.store import ledger as ledger_module
from nightshift.store import migrations
from nightshift.store import missed_nights as missed_nights_module
from nightshift.store import night_traces as night_traces_module
from nightshift.store import outbox as outbox_module
from nightshift.store import slot_holders as slot_holders_module
from nightshift.store.db import make_engine
from nightshift.store.lease import Lease
from nightshift.store.ledger import BEFORE_CATALOGUES, JobRecord, Ledger
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)
NIGHT = "2026-11-29"

# today's schema (before migrations), written out as create_all made it: never import it
OLD = sa.MetaData()
sa.Table(
    "transitions",
    OLD,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("night", sa.String(32), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("backend", sa.String(64), nullable=False),
    sa.Column("external_id", sa.String(500), nullable=True),
    sa.Column("from_state", sa.String(32), nullable=True),
    sa.Column("to_state", sa.String(32), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("dwell_s", sa.Float, nullable=True),
    sa.Index("ix_transitions_night_label", "night", "label", "id"),
    sa.Index("ix_transitions_at", "at"),
)
sa.Table(
    "jobs",
    OLD,
    sa.Column("night", sa.String(32), primary_key=True),
    sa.Column("label", sa.String(200), primary_key=True),
    sa.Column("backend", sa.String(64), nullable=True),
    sa.Column("external_id", sa.String(500), nullable=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("detail", sa.Text, nullable=True),
    sa.Column("data", sa.Text, nullable=True),
    sa.Index("ix_jobs_label_state", "label", "state"),
)
sa.Table(
    "leases",
    OLD,
    sa.Column("key", sa.String(300), primary_key=True),
    sa.Column("owner", sa.String(300), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)

# the job _fill_old_ledger writes, as the new Ledger reads it back
_OLD_JOB = JobRecord(
    night=NIGHT,
    label="etl",
    backend="cli",
    external_id="job-old",
    state="succeeded",
    attempts=1,
    submitted_at=T0,
    finished_at=T0 + timedelta(seconds=70),
    detail="42 rows",
    data={"rows": 42},
)


def _naive(at: datetime, engine: sa.Engine) -> datetime:
    """How today's code stored a time: naive UTC on SQLite, aware on PostgreSQL."""
    return at.replace(tzinfo=None) if engine.dialect.name == "sqlite" else at


def _fill_old_ledger(url: str, *, with_leases: bool = True) -> None:
    """A ledger as today's code leaves it: one finished job, its transitions, a lease."""
    engine = make_engine(url)
    tables = [t for t in OLD.sorted_tables if with_leases or t.name != "leases"]
    with engine.begin() as conn:
        OLD.create_all(conn, tables=tables)
        for to_state, from_state, offset, dwell in [
            ("queued", None, 0, None),
            ("running", "queued", 10, 10.0),
            ("succeeded", "running", 70, 60.0),
        ]:
            conn.execute(
                OLD.tables["transitions"].insert(),
                {
                    "night": NIGHT,
                    "run_id": "run-old",
                    "label": "etl",
                    "backend": "cli",
                    "external_id": "job-old",
                    "from_state": from_state,
                    "to_state": to_state,
                    "at": _naive(T0 + timedelta(seconds=offset), engine),
                    "dwell_s": dwell,
                },
            )
        conn.execute(
            OLD.tables["jobs"].insert(),
            {
                "night": NIGHT,
                "label": "etl",
                "backend": "cli",
                "external_id": "job-old",
                "state": "succeeded",
                "attempts": 1,
                "submitted_at": _naive(T0, engine),
                "finished_at": _naive(T0 + timedelta(seconds=70), engine),
                "detail": "42 rows",
                "data": json.dumps({"rows": 42}),
            },
        )
        if with_leases:
            conn.execute(
                OLD.tables["leases"].insert(),
                {"key": "nightly.yaml", "owner": "old:1:x", "expires_at": _naive(T0, engine)},
            )
    engine.dispose()


def _revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        return migrations.current_revision(engine)
    finally:
        engine.dispose()


def test_head_is_the_last_revision_on_disk() -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    script = ScriptDirectory.from_config(config)

    chain = [rev.revision for rev in script.walk_revisions()]

    assert chain == [
        migrations.HEAD,
        "0011",
        "0010",
        "0009",
        "0008",
        "0007",
        "0006",
        "0005",
        "0004",
        "0003",
        "0002",
        "0001",
    ]
    assert script.get_current_head() == migrations.HEAD


def test_a_new_database_gets_exactly_the_schema_the_code_declares(db_url: str) -> None:
    ledger = Ledger(db_url)

    both = [
        ledger_module._metadata,
        lease_module._metadata,
        alert_log_module._metadata,
        snapshots_module._metadata,
        outbox_module._metadata,
        slot_holders_module._metadata,
        cancel_requests_module._metadata,
        forecasts_module._metadata,
        missed_nights_module._metadata,
        night_traces_module._metadata,
    ]
    with ledger.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE})
        diff = compare_metadata(context, both)  # type: ignore[arg-type]
        keys = sa.inspect(conn).get_pk_constraint("jobs")["constrained_columns"]
    assert diff == []
    assert keys == ["catalogue", "night", "label"]
    assert _revision(db_url) == migrations.HEAD


@pytest.mark.parametrize("with_leases", [True, False], ids=["with-leases", "before-leases"])
def test_a_ledger_from_before_migrations_upgrades_in_place(db_url: str, with_leases: bool) -> None:
    _fill_old_ledger(db_url, with_leases=with_leases)
    assert _revision(db_url) is None

    tonight = Ledger(db_url, "nightly.yaml")

    assert _revision(db_url) == migrations.HEAD
    # the old rows belong to no catalogue: tonight's catalogue does not see them...
    assert tonight.get_job(NIGHT, "etl") is None
    assert tonight.dwells(NIGHT) == []
    assert tonight.history(since=T0).empty
    assert tonight.expected_durations(["etl"], since=T0) == {}
    # ...and runs the same night and label afresh, next to them
    tonight.record_submit(NIGHT, "etl", "cli", "job-new", 1, at=T0 + timedelta(hours=1))
    tonight.transition(NIGHT, "run-new", "etl", "cli", "job-new", "queued")
    assert [(r.from_state, r.to_state) for r in tonight.dwells(NIGHT)] == [(None, "queued")]

    # the old rows are all still there, read back unchanged
    before = Ledger(db_url, BEFORE_CATALOGUES)
    assert before.get_job(NIGHT, "etl") == _OLD_JOB
    assert [(r.run_id, r.from_state, r.to_state, r.dwell_s) for r in before.dwells(NIGHT)] == [
        ("run-old", None, "queued", None),
        ("run-old", "queued", "running", 10.0),
        ("run-old", "running", "succeeded", 60.0),
    ]
    assert before.expected_durations(["etl"], since=T0) == {"etl": 70.0}
    assert list(before.history(since=T0)["dwell_s"]) == [10.0, 60.0]
    # the lease table works as before (an old lease row included)
    lease = Lease(tonight.engine, "nightly.yaml", "new:2:y", clock=lambda: T0 + timedelta(hours=1))
    lease.acquire()
    holder = lease.holder()
    assert holder is not None and holder[0] == "new:2:y"
    if db_url.startswith("sqlite"):  # one host: its clock is the lease's
        assert holder[1] == T0 + timedelta(hours=1, seconds=60)
    else:  # the server's clock
        assert holder[1] > datetime.now(UTC)


def test_upgrading_leaves_the_apps_logging_alone(db_url: str) -> None:
    app = logging.getLogger("nightshift.test.app")
    root = logging.getLogger()
    before = (list(root.handlers), root.level, app.disabled, app.level)

    ledger = Ledger(db_url)

    assert ledger.schema_upgrade == (None, migrations.HEAD)
    assert (list(root.handlers), root.level, app.disabled, app.level) == before
    assert Ledger(db_url).schema_upgrade is None


def test_at_head_a_ledger_costs_one_small_query(db_url: str) -> None:
    Ledger(db_url).close()
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.startswith("BEGIN"):  # SQLite's BEGIN IMMEDIATE is the transaction
            statements.append(" ".join(statement.split()))

    sa.event.listen(sa.Engine, "before_cursor_execute", record)
    try:
        Ledger(db_url).close()
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", record)

    assert statements == ["SELECT version_num FROM nightshift_alembic_version"]


def test_a_schema_newer_than_the_code_is_refused_in_one_line(db_url: str) -> None:
    Ledger(db_url).close()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE nightshift_alembic_version SET version_num = '0099'"))
    engine.dispose()

    with pytest.raises(migrations.SchemaTooNewError) as caught:
        Ledger(db_url)

    assert str(caught.value) == (
        "ledger schema is at revision 0099, newer than this Nightshift knows "
        f"(up to {migrations.HEAD}): upgrade Nightshift"
    )


# a child imports what an upgrade needs up front, so the race is the upgrade, not the imports
CHILD = """
import json, sys, time
from pathlib import Path
import alembic.command, alembic.config, alembic.runtime.migration
from nightshift.store import migrations
from nightshift.store import outbox as outbox_module
from nightshift.store.db import make_engine

url, me, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
engine = make_engine(url)
(folder / f"ready-{me}").touch()
while not (folder / "go").exists():
    time.sleep(0.005)
print(json.dumps(migrations.upgrade(engine)))
"""


@pytest.mark.parametrize("start", ["fresh", "before-migrations"])
def test_processes_starting_together_upgrade_once(db_url: str, tmp_path: Path, start: str) -> None:
    if start == "before-migrations":
        _fill_old_ledger(db_url)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, db_url, str(i), str(tmp_path)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]

    # release them together once all have imported everything (the slow part)
    def ready() -> bool:
        if len(list(tmp_path.glob("ready-*"))) >= len(children):
            return True
        assert all(child.poll() is None for child in children), [c.communicate() for c in children]
        return False

    wait_until(ready, 120, "the children to get ready", interval=0.01)
    (tmp_path / "go").touch()
    results = [child.communicate(timeout=120) for child in children]

    assert [child.returncode for child in children] == [0, 0], [err for _, err in results]
    upgrades = sorted((json.loads(out) for out, _ in results), key=str)
    assert upgrades == [None, [None, migrations.HEAD]]  # one upgraded, the other found it done
    ledger = Ledger(db_url, "nightly.yaml")
    with ledger.engine.connect() as conn:
        assert conn.execute(
            sa.text("SELECT version_num FROM nightshift_alembic_version")
        ).all() == [(migrations.HEAD,)]
    ledger.record_submit(NIGHT, "etl", "cli", "job-new", 1, at=T0)
    assert Ledger(db_url, BEFORE_CATALOGUES).get_job(NIGHT, "etl") == (
        _OLD_JOB if start == "before-migrations" else None
    )


def test_a_lease_taken_before_the_first_ledger_is_kept(db_url: str) -> None:
    Lease(db_url, "nightly.yaml", "early:1:z").acquire()  # creates only its own table

    Ledger(db_url, "nightly.yaml").record_state(NIGHT, "etl", "failed", detail="no input")

    assert _revision(db_url) == migrations.HEAD
    held = Lease(db_url, "nightly.yaml", "other").holder()
    assert held is not None and held[0] == "early:1:z"


@pytest.mark.parametrize(
    "revision", [r for r in migrations.KNOWN if r not in (None, migrations.HEAD)]
)
def test_a_ledger_at_any_earlier_revision_upgrades_to_head(db_url: str, revision: str) -> None:
    engine = make_engine(db_url)
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    from alembic import command

    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    engine.dispose()
    assert _revision(db_url) == revision

    ledger = Ledger(db_url, "nightly.yaml")

    assert ledger.schema_upgrade == (revision, migrations.HEAD)
    ledger.close()


def test_every_revision_on_disk_up_to_head_is_known() -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    script = ScriptDirectory.from_config(config)

    below_head = [rev.revision for rev in script.iterate_revisions(migrations.HEAD, "base")]

    assert set(below_head) <= set(migrations.KNOWN)  # a ledger at any of them is upgraded


def test_revision_0002_can_be_undone_and_redone(db_url: str) -> None:
    Ledger(db_url, "nightly.yaml").record_submit(NIGHT, "etl", "cli", "job-1", 1, at=T0)
    engine = make_engine(db_url)
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    from alembic import command

    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0001")
    assert _revision(db_url) == "0001"
    with engine.connect() as conn:
        assert "catalogue" not in {c["name"] for c in sa.inspect(conn).get_columns("jobs")}
    engine.dispose()

    assert Ledger(db_url, BEFORE_CATALOGUES).get_job(NIGHT, "etl") is not None
    assert _revision(db_url) == migrations.HEAD


def test_a_ledger_at_0002_upgrades_to_attempts_and_keeps_its_rows(db_url: str) -> None:
    engine = make_engine(db_url)
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    from alembic import command

    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0002")
    _fill_0002(engine)
    engine.dispose()
    assert _revision(db_url) == "0002"

    ledger = Ledger(db_url, "nightly.yaml")

    assert ledger.schema_upgrade == ("0002", migrations.HEAD)
    assert [(r.from_state, r.to_state, r.dwell_s, r.attempt) for r in ledger.dwells(NIGHT)] == [
        (None, "queued", None, None),
        ("queued", "failed", 10.0, None),
    ]
    # the rerun resubmits: an old row's unknown attempt measures as before, then attempts count
    ledger.transition(NIGHT, "run-2", "etl", "cli", "job-2", "queued", at=T0 + timedelta(hours=1))
    ledger.transition(
        NIGHT,
        "run-2",
        "etl",
        "cli",
        "job-2",
        "running",
        at=T0 + timedelta(hours=1, seconds=5),
        attempt=2,
    )
    ledger.transition(
        NIGHT, "run-3", "etl", "cli", "job-3", "queued", at=T0 + timedelta(hours=2), attempt=3
    )
    assert [(r.from_state, r.dwell_s, r.attempt) for r in ledger.dwells(NIGHT)][2:] == [
        ("failed", 3590.0, None),
        ("queued", 5.0, 2),
        ("running", None, 3),
    ]


def _fill_0002(engine: sa.Engine) -> None:
    """Two transitions of one catalogue's job, as revision 0002's code wrote them."""
    transitions = sa.Table("transitions", sa.MetaData(), autoload_with=engine)
    assert "attempt" not in transitions.c
    with engine.begin() as conn:
        for to_state, from_state, offset, dwell in [
            ("queued", None, 0, None),
            ("failed", "queued", 10, 10.0),
        ]:
            conn.execute(
                transitions.insert(),
                {
                    "catalogue": "nightly.yaml",
                    "night": NIGHT,
                    "run_id": "run-1",
                    "label": "etl",
                    "backend": "cli",
                    "external_id": "job-1",
                    "from_state": from_state,
                    "to_state": to_state,
                    "at": _naive(T0 + timedelta(seconds=offset), engine),
                    "dwell_s": dwell,
                },
            )


PREFECTS = "91e2b8f3d6a4"  # a revision of another Alembic user of the same database


def _shared_versions(db_url: str) -> list[str] | None:
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                return None
            return sorted(
                conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars()
            )
    finally:
        engine.dispose()


def _put_shared(db_url: str, *revisions: str) -> None:
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        for revision in revisions:
            conn.execute(sa.text("INSERT INTO alembic_version VALUES (:r)"), {"r": revision})
    engine.dispose()


def test_a_database_shared_with_a_prefect_server_keeps_both_revisions(db_url: str) -> None:
    # the Prefect server's own migrations keep their revision in alembic_version
    _put_shared(db_url, PREFECTS)

    ledger = Ledger(db_url, "nightly.yaml")
    ledger.transition(NIGHT, "run", "etl", "cli", "x", "queued")

    assert _shared_versions(db_url) == [PREFECTS]  # untouched: the server still starts
    assert _revision(db_url) == migrations.HEAD
    assert Ledger(db_url, "nightly.yaml").schema_upgrade is None


@pytest.mark.parametrize("others", [(), (PREFECTS,)], ids=["alone", "beside-prefect"])
def test_a_ledger_that_kept_its_revision_in_alembic_version_is_adopted(
    db_url: str, others: tuple[str, ...]
) -> None:
    Ledger(db_url, "nightly.yaml").transition(NIGHT, "run", "etl", "cli", "x", "queued")
    engine = make_engine(db_url)
    with engine.begin() as conn:  # as Nightshift up to revision 0004 left it
        conn.execute(sa.text(f"DROP TABLE {migrations.VERSION_TABLE}"))
    engine.dispose()
    _put_shared(db_url, migrations.HEAD, *others)

    ledger = Ledger(db_url, "nightly.yaml")

    assert ledger.schema_upgrade is None  # nothing to run: only where the revision is kept moved
    assert _revision(db_url) == migrations.HEAD
    assert _shared_versions(db_url) == (sorted(others) if others else None)
    assert [r.to_state for r in ledger.dwells(NIGHT)] == ["queued"]
