"""The measurement archive's time partitions (PostgreSQL; SQLite, the zero-setup default, stays one table).

``results_measurement`` is range-partitioned by ``finished_at``: one partition per UTC month, created ahead
(``AHEAD`` months, by `manage.py prune_archive`), a default partition for rows no month covers (a late or kept
row older than the oldest month, a row from a wrong clock far ahead), and, on an archive that was upgraded, the
old table itself as one partition from MINVALUE to the first month (``LEGACY``), attached in place.

Why the primary key is (id, finished_at) in the database: a partitioned table's unique keys must hold the
partition key. Django's model keeps ``id`` as its primary key (lookups by id probe each partition's index), and
the four tables that point at measurements (per-file rows, grid cells, changes, paths) do so without a database
foreign key: the code that removes measurements removes their rows first (Django's delete, ``retire``).

Retention (results.retention) drops a month whole once all of it is past its age, instead of deleting its rows
one by one: the rows that must stay (a grid cell's newest, a change's, one delivered after its day was rolled up)
move to the default partition first. Rows outside the month partitions go by row deletes, as on SQLite.

Planning (which months, which names) is pure; the rest is the DDL, on a Django connection's cursor.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.db import OperationalError, connection, transaction

TABLE = "results_measurement"
DEFAULT = f"{TABLE}_default"
LEGACY = f"{TABLE}_legacy"  # the unpartitioned table an upgraded archive had, attached as one partition
RETIRING = "_retiring"  # suffix of a partition detached by retire() whose kept rows have not moved out yet
AHEAD = 3  # months created ahead of the current one
LOCK_TIMEOUT = "5s"  # a DETACH waits this long for running queries (new ones queue behind it), then gives up


# --- planning (pure) -------------------------------------------------------------------------------------------

def month_of(t: datetime | date) -> date:
    """The first day of the UTC month ``t`` falls in."""
    d = t.astimezone(UTC).date() if isinstance(t, datetime) else t
    return d.replace(day=1)


def add_months(d: date, n: int) -> date:
    """The first day of the month ``n`` months after ``d``'s."""
    k = d.year * 12 + d.month - 1 + n
    return date(k // 12, k % 12 + 1, 1)


def at(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def month_name(start: date) -> str:
    return f"{TABLE}_y{start.year}m{start.month:02d}"


@dataclass(frozen=True)
class Partition:
    """A partition and its range; ``lower`` None: MINVALUE; both None: the default partition."""

    name: str
    lower: datetime | None
    upper: datetime | None

    @property
    def default(self) -> bool:
        return self.upper is None


def months_to_create(partitions: list[Partition], now: datetime, ahead: int = AHEAD) -> list[date]:
    """The months after the newest range partition up to ``ahead`` months after ``now``'s, oldest first. Never a
    month before the newest one: a row of an older month goes to the default partition."""
    uppers = [p.upper for p in partitions if p.upper is not None]
    first = month_of(max(uppers)) if uppers else month_of(now)
    last = add_months(month_of(now), ahead)
    out = []
    while first <= last:
        out.append(first)
        first = add_months(first, 1)
    return out


def past(partitions: list[Partition], cutoff: datetime) -> list[Partition]:
    """The range partitions all of whose rows finished before ``cutoff``, oldest first."""
    return sorted((p for p in partitions if p.upper is not None and p.upper <= cutoff),
                  key=lambda p: p.upper or cutoff)


def month_span(partitions: list[Partition]) -> tuple[datetime, datetime] | None:
    """Where the month partitions begin and end (they are contiguous: created after the newest, dropped from the
    oldest); rows outside go by row deletes."""
    months = [p for p in partitions if p.lower is not None and p.upper is not None]
    if not months:
        return None
    return min(p.lower for p in months if p.lower), max(p.upper for p in months if p.upper)


BOUND = re.compile(r"FOR VALUES FROM \((MINVALUE|'[^']*')\) TO \((MAXVALUE|'[^']*')\)")


def parse_bound(name: str, spec: str) -> Partition:
    """A partition from pg_get_expr(relpartbound) (timestamps as the UTC session writes them)."""
    if spec == "DEFAULT":
        return Partition(name, None, None)
    m = BOUND.fullmatch(spec)
    if not m:
        raise ValueError(f"partition {name}: unexpected bound {spec!r}")

    def value(v: str) -> datetime | None:
        return None if v.endswith("VALUE") else datetime.fromisoformat(v.strip("'")).astimezone(UTC)

    return Partition(name, value(m.group(1)), value(m.group(2)))


# --- the database ----------------------------------------------------------------------------------------------

def _literal(t: datetime) -> str:
    return f"'{t.astimezone(UTC).isoformat()}'"


def _columns() -> str:
    from results.models import Measurement

    return ", ".join(f.column for f in Measurement._meta.concrete_fields)


def enabled() -> bool:
    """The measurement table is partitioned (PostgreSQL, migrated)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])
        row = cur.fetchone()
    return bool(row) and row[0] == "p"


def partitions() -> list[Partition]:
    with connection.cursor() as cur:
        cur.execute("SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
                    "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)", [TABLE])
        return [parse_bound(name, spec) for name, spec in cur.fetchall()]


def create_month(start: date) -> int:
    """Attach the partition of the month from ``start``, moving the default partition's rows of that month into
    it first (a month created late); the number moved. ATTACH locks the parent in SHARE UPDATE EXCLUSIVE mode
    only (reads and ingest go on), the default partition (scanned for rows of the range) exclusively."""
    name, lo, hi = month_name(start), at(start), at(add_months(start, 1))
    cols = _columns()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")  # ATTACH waits for queries on the default one
        cur.execute(f"CREATE TABLE {name} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)")
        cur.execute(f"WITH moved AS (DELETE FROM {DEFAULT} WHERE finished_at >= {_literal(lo)} AND finished_at < "
                    f"{_literal(hi)} RETURNING {cols}) INSERT INTO {name} ({cols}) SELECT {cols} FROM moved")
        moved = cur.rowcount
        cur.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {name} FOR VALUES FROM ({_literal(lo)}) "
                    f"TO ({_literal(hi)})")
    return moved


def busy(e: OperationalError) -> bool:
    """The error is LOCK_TIMEOUT running out (lock_not_available): the next prune tries again."""
    return getattr(e.__cause__, "pgcode", None) == "55P03"


def create_ahead(now: datetime, ahead: int = AHEAD, log: Callable[[str], None] = lambda _: None) -> list[str]:
    """Create the months up to ``ahead`` after ``now``'s that are missing; their names."""
    made = []
    for start in months_to_create(partitions(), now, ahead):
        try:
            create_month(start)
        except OperationalError as e:
            if not busy(e):
                raise
            log(f"Partition {month_name(start)} not created: the default partition stayed busy {LOCK_TIMEOUT}.")
            break  # the months stay contiguous: the next prune goes on from here
        made.append(month_name(start))
    return made


def _keep_sql(table: str, p: Partition) -> str:
    """The rows of a detached partition that must stay: a grid cell's newest, a change's (retention.protected),
    and any delivered from LATE_MARGIN before the first rollup of its range on (retention's rolled_up() decides
    exactly; this keeps more, never less: the extra rows go to the default partition, pruned there by row)."""
    from results.models import DailyRollup
    from results.retention import LATE_MARGIN, protected

    ids = []
    for qs in protected():
        sql, params = qs.query.sql_with_params()
        assert not params, params  # a plain column list: no parameters to bind
        ids.append(f"{table}.id IN ({sql})")
    days = [f"day < '{p.upper.date()}'"] if p.upper else []
    if p.lower:
        days.append(f"day >= '{p.lower.date()}'")
    first_rollup = (f"(SELECT min(rolled_at) FROM {DailyRollup._meta.db_table} "
                    f"WHERE {' AND '.join(days) or 'true'})")
    late = (f"{table}.ingested_at + interval '{int(LATE_MARGIN.total_seconds())} seconds' >= "
            f"coalesce({first_rollup}, '-infinity')")
    return " OR ".join([*ids, late])


@dataclass
class Retired:
    name: str
    dropped: int  # measurements dropped with it
    moved: int  # kept: moved to the default partition


def _retiring() -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE %s AND NOT relispartition "
                    "AND relnamespace = current_schema()::regnamespace", [f"{TABLE}%{RETIRING}"])
        return sorted(r[0] for r in cur.fetchall())


def finish(detached: str, p: Partition) -> Retired:
    """Move a detached partition's kept rows back (to the default partition), remove the rows that point at the
    others (paths, per-file rows), drop it. Each step one transaction, each repeatable: a prune stopped halfway
    leaves the table, and the next one finishes it."""
    from results.models import FileTransfer, Path

    cols = _columns()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"WITH kept AS (DELETE FROM {detached} WHERE {_keep_sql(detached, p)} RETURNING {cols}) "
                    f"INSERT INTO {TABLE} ({cols}) SELECT {cols} FROM kept")
        moved = cur.rowcount
    with transaction.atomic(), connection.cursor() as cur:
        for model in (Path, FileTransfer):
            cur.execute(f"DELETE FROM {model._meta.db_table} WHERE measurement_id IN (SELECT id FROM {detached})")
        cur.execute(f"SELECT count(*) FROM {detached}")
        dropped = cur.fetchone()[0]
        cur.execute(f"DROP TABLE {detached}")
    return Retired(detached.removesuffix(RETIRING), dropped, moved)


def _bound_comment(p: Partition) -> str:
    return f"{p.lower.isoformat() if p.lower else ''}/{p.upper.isoformat() if p.upper else ''}"


def retire(p: Partition) -> Retired:
    """Drop a partition past its age: detach it (a lock on the measurement table for an instant, waiting at most
    LOCK_TIMEOUT for running queries), then finish() it. Every transaction that could see its rows ended before
    the detach, so the kept rows finish() finds are all of them (a grid cell, a change or a late row pointing at
    one came with a transaction that saw it)."""
    detached = p.name + RETIRING
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cur.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {p.name}")
        cur.execute(f"ALTER TABLE {p.name} RENAME TO {detached}")
        cur.execute(f"COMMENT ON TABLE {detached} IS %s", [_bound_comment(p)])  # its range, for a resumed finish
    return finish(detached, p)


def resume() -> list[Retired]:
    """Finish the partitions a stopped prune detached."""
    out = []
    for detached in _retiring():
        with connection.cursor() as cur:
            cur.execute("SELECT obj_description(to_regclass(%s), 'pg_class')", [detached])
            lower, _, upper = (cur.fetchone()[0] or "/").partition("/")
        p = Partition(detached, datetime.fromisoformat(lower) if lower else None,
                      datetime.fromisoformat(upper) if upper else None)
        out.append(finish(detached, p))
    return out


def retire_past(cutoff: datetime, log: Callable[[str], None] = lambda _: None) -> list[Retired]:
    out = resume()
    for p in past(partitions(), cutoff):
        try:
            r = retire(p)
        except OperationalError as e:
            if not busy(e):
                raise
            log(f"Partition {p.name} not dropped: the measurement table stayed busy {LOCK_TIMEOUT}.")
            break  # oldest first: the next prune goes on from here
        log(f"Dropped partition {r.name}: {r.dropped} measurement(s), {r.moved} kept (moved to {DEFAULT}).")
        out.append(r)
    return out


# --- the upgrade (migration) -----------------------------------------------------------------------------------

def _index_defs(cur, table: str) -> list[tuple[str, str]]:
    cur.execute("SELECT i.relname, pg_get_indexdef(i.oid), x.indisprimary FROM pg_index x "
                "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = to_regclass(%s)", [table])
    return [(name, sql) for name, sql, primary in cur.fetchall() if not primary]


def _fk_defs(cur, table: str) -> list[tuple[str, str]]:
    cur.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = to_regclass(%s) "
                "AND contype = 'f'", [table])
    return cur.fetchall()


UNIQUE = f"{TABLE}_id_finished"  # the old table's unique (id, finished_at): the partitioned key's index there
BOUND_CHECK = f"{TABLE}_legacy_bound"


def partition_table(now: datetime, log: Callable[[str], None] = lambda _: None) -> None:
    """Turn the unpartitioned measurement table into the partitioned one in place, keeping every row: the old
    table becomes the partition of everything before the month after next (``first``), attached as it is.

    The heavy parts run first, each its own transaction: the unique index on (id, finished_at) the partitioned key
    needs (reads go on, writes wait for the build; not CONCURRENTLY: that waits for every older snapshot, and a
    second dashboard pod waiting for `manage.py locked`'s lock holds one, a deadlock. An index of that name built
    concurrently by hand beforehand is used as it is), then a CHECK that its rows are before ``first``, validated
    under SHARE UPDATE EXCLUSIVE (reads and writes go on), so ATTACH need not scan. Then one short transaction
    under an exclusive lock: rename it, create the partitioned table with its indexes and keys, attach it. Rows
    from a wrong clock at or after ``first`` (no CHECK then) move to the new partitions, and ATTACH scans the old
    table under the lock."""
    with connection.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])
        if cur.fetchone()[0] == "p":
            return
        first = at(add_months(month_of(now), 2))
        cur.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [UNIQUE])
        row = cur.fetchone()
        if row and not row[0]:  # a concurrent build (by hand) that failed leaves an invalid index
            cur.execute(f"DROP INDEX {UNIQUE}")
        cur.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {UNIQUE} ON {TABLE} (id, finished_at)")
        log(f"Built {UNIQUE}.")
        cur.execute(f"SELECT EXISTS (SELECT 1 FROM {TABLE} WHERE finished_at >= {_literal(first)})")
        ahead = cur.fetchone()[0]
        cur.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS {BOUND_CHECK}")
        if not ahead:
            cur.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {BOUND_CHECK} CHECK (finished_at < {_literal(first)}) "
                        "NOT VALID")
            cur.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {BOUND_CHECK}")
    log("Rows from a wrong clock ahead: they move, ATTACH scans." if ahead else "CHECK validated.")
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        indexes, fks = _index_defs(cur, TABLE), _fk_defs(cur, TABLE)
        cur.execute(f"ALTER TABLE {TABLE} RENAME TO {LEGACY}")
        # its key becomes (id, finished_at), on the index built above: ATTACH adopts a key's index, never a plain
        # unique one (it would build another, under this lock)
        cur.execute("SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'", [LEGACY])
        for (pkey,) in cur.fetchall():
            cur.execute(f"ALTER TABLE {LEGACY} DROP CONSTRAINT {pkey}")
        cur.execute(f"ALTER TABLE {LEGACY} ADD CONSTRAINT {LEGACY}_pkey PRIMARY KEY USING INDEX {UNIQUE}")
        for i, (name, _) in enumerate(indexes):
            if name != UNIQUE:  # the new table's indexes take their names
                cur.execute(f"ALTER INDEX {name} RENAME TO {LEGACY}_{i}")
        cur.execute(f"CREATE TABLE {TABLE} (LIKE {LEGACY} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
                    f"INCLUDING STORAGE) PARTITION BY RANGE (finished_at)")
        cur.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS {BOUND_CHECK}")
        cur.execute(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (id, finished_at)")
        for name, sql in fks:
            cur.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} {sql}")
        for name, sql in indexes:
            if name != UNIQUE:  # pg_get_indexdef named the table, which is the partitioned one now
                cur.execute(sql)
        cur.execute(f"CREATE TABLE {DEFAULT} PARTITION OF {TABLE} DEFAULT")
        start = month_of(first)
        while start <= add_months(month_of(now), AHEAD):
            cur.execute(f"CREATE TABLE {month_name(start)} PARTITION OF {TABLE} FOR VALUES FROM "
                        f"({_literal(at(start))}) TO ({_literal(at(add_months(start, 1)))})")
            start = add_months(start, 1)
        if ahead:
            # the same columns in the same order (LIKE): not the model's, which may be a later migration's
            cur.execute(f"WITH moved AS (DELETE FROM {LEGACY} WHERE finished_at >= {_literal(first)} RETURNING *) "
                        f"INSERT INTO {TABLE} SELECT * FROM moved")
            log(f"Moved {cur.rowcount} row(s) finished after {first:%Y-%m-%d} to their partitions.")
        log("Swapped; attaching.")
        cur.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {LEGACY} FOR VALUES FROM (MINVALUE) TO ({_literal(first)})")
        cur.execute(f"ALTER TABLE {LEGACY} DROP CONSTRAINT IF EXISTS {BOUND_CHECK}")
        log("Attached.")


def unpartition_table() -> None:
    """The migration's reverse: copy every row into one plain table again (a test's or a downgrade's archive)."""
    with connection.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])
        if cur.fetchone()[0] != "p":
            return
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        indexes, fks = _index_defs(cur, TABLE), _fk_defs(cur, TABLE)
        plain = f"{TABLE}_plain"
        cur.execute(f"CREATE TABLE {plain} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
                    "INCLUDING STORAGE)")
        cur.execute(f"INSERT INTO {plain} SELECT * FROM {TABLE}")
        cur.execute(f"DROP TABLE {TABLE} CASCADE")
        for name in _retiring():
            cur.execute(f"INSERT INTO {plain} SELECT * FROM {name}")
            cur.execute(f"DROP TABLE {name}")
        cur.execute(f"ALTER TABLE {plain} RENAME TO {TABLE}")
        cur.execute(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (id)")
        for _, sql in indexes:
            cur.execute(sql.replace(" ON ONLY ", " ON "))
        for name, sql in fks:
            cur.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} {sql}")
