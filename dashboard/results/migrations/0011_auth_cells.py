"""The grid's cells keyed by the auth mode (token, x509, none; "" for a protocol without modes) too, like the
address family and the congestion control (#13): a benchmark whose spec.auth changed, or two modes measured on one
pair, no longer mix in one cell where the newest silently won. Existing cells take their measurement's mode; the
modes that a newer one had overwritten get their cells back (each one's newest measurement); the stored JSON gains
the field."""

from django.db import migrations, models

CELLS, MEASUREMENTS, CHANGES = "results_pairlatest", "results_measurement", "results_change"
# The cells' stored JSON as this migration wrote it (results.celljson.fill_sql of its day, frozen here: a
# migration keeps doing what it did when the live definition, results.gridcell, changes).
FILL_CELL_JSON = """
        UPDATE results_pairlatest p SET cell_json = (
        '"source":' || to_json(s.name)::text || ',"destination":' || to_json(d.name)::text
        || ',"streams":' || p.streams || ',"address_family":' || to_json(p.address_family)::text
        || ',"congestion_control":' || to_json(p.congestion_control)::text
        || ',"auth":' || to_json(p.auth)::text
        || ',"value":' || coalesce((CASE WHEN p.protocol = 'rtt' THEN p.rtt_ms
                                         ELSE p.throughput_gbps END)::text, 'null')
        || ',"finished_at":"' || to_char(p.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
        || '","status":' || to_json(p.status)::text || ',"error":' || coalesce(to_json(p.error)::text, 'null')
        || ',"count":' || p.repeats || ',"low":' || coalesce(p.low::text, 'null')
        || ',"high":' || coalesce(p.high::text, 'null'))
        FROM results_node s, results_node d WHERE s.id = p.source_id AND d.id = p.destination_id AND (true)"""
# a cell's key before this migration, as columns of a PairLatest row and as expressions over a measurement's
OLD_KEY = ["benchmark_id", "protocol", "streams", "address_family", "congestion_control", "source_id",
           "destination_id"]
OF_MEASUREMENT = ["m.benchmark_id", "m.protocol", "coalesce(m.streams, 0)", "m.address_family",
                  "coalesce(m.congestion_control, '')", "m.source_id", "m.destination_id"]


def fill_auth(apps, schema_editor):
    """Portable SQL (PostgreSQL, SQLite 3.25+). Only measurements whose mode differs from their cell's are
    ranked: one pass over the measurements, no sort of the whole history."""
    postgresql = schema_editor.connection.vendor == "postgresql"
    if postgresql:
        # the restored cells' foreign keys checked at once: deferred checks would leave trigger events pending,
        # for which PostgreSQL refuses the AddConstraint (ALTER TABLE) after this
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    for table in (CELLS, CHANGES):
        schema_editor.execute(f"""
            UPDATE {table} SET auth = coalesce(
                (SELECT m.auth FROM {MEASUREMENTS} m WHERE m.id = {table}.measurement_id), '')""")
    same_cell = " AND ".join(f"p.{c} = {e}" for c, e in zip(OLD_KEY, OF_MEASUREMENT))
    schema_editor.execute(f"""
        INSERT INTO {CELLS} (benchmark_id, protocol, streams, address_family, congestion_control, auth, source_id,
                             destination_id, measurement_id, finished_at, throughput_gbps, rtt_ms, status, error,
                             repeats)
        SELECT benchmark_id, protocol, streams, address_family, congestion_control, auth, source_id, destination_id,
               id, finished_at, throughput_gbps, rtt_ms, status, substr(error, 1, 200), 1
        FROM (
            SELECT {", ".join(f"{e} AS {c}" for c, e in zip(OLD_KEY, OF_MEASUREMENT))},
                   coalesce(m.auth, '') AS auth, m.id,
                   m.finished_at, m.throughput_gbps, m.rtt_ms, m.status, m.error,
                   row_number() OVER (PARTITION BY {", ".join(OF_MEASUREMENT)}, coalesce(m.auth, '')
                                      ORDER BY m.finished_at DESC, m.id DESC) AS newest
            FROM {MEASUREMENTS} m JOIN {CELLS} p ON {same_cell}
            WHERE coalesce(m.auth, '') <> p.auth
        ) o
        WHERE newest = 1""")
    if postgresql:
        # the newest migration that changes the cells' JSON fields writes every cell's JSON (FILL_CELL_JSON
        # names the columns of this migration's day); the earlier ones (0003, 0009, 0010) no longer do. Still with
        # immediate checks: an update of a row this transaction inserted queues its key checks again.
        schema_editor.execute(FILL_CELL_JSON)
        schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")


def keep_newest_mode(apps, schema_editor):
    """Back to one cell per setting: each setting's newest cell stays."""
    same_setting = " AND ".join(f"n.{c} = {CELLS}.{c}" for c in OLD_KEY)
    schema_editor.execute(f"""
        DELETE FROM {CELLS} WHERE EXISTS (
            SELECT 1 FROM {CELLS} n WHERE {same_setting}
              AND (n.finished_at > {CELLS}.finished_at OR (n.finished_at = {CELLS}.finished_at AND n.id > {CELLS}.id)))""")


class Migration(migrations.Migration):

    dependencies = [
        ('results', '0010_address_family'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='pairlatest',
            name='pairlatest_setting_cell',
        ),
        migrations.AddField(
            model_name='pairlatest',
            name='auth',
            field=models.CharField(blank=True, db_default='', default='', help_text='token, x509 or none; empty: a protocol without auth modes', max_length=8),
        ),
        migrations.AddField(
            model_name='change',
            name='auth',
            field=models.CharField(blank=True, db_default='', default='', help_text='token, x509 or none; empty: a protocol without auth modes', max_length=8),
        ),
        migrations.RunPython(fill_auth, keep_newest_mode),
        migrations.AddConstraint(
            model_name='pairlatest',
            constraint=models.UniqueConstraint(fields=('benchmark', 'protocol', 'auth', 'streams', 'address_family', 'congestion_control', 'source', 'destination'), name='pairlatest_auth_cell'),
        ),
        migrations.RemoveIndex(
            model_name='measurement',
            name='meas_window',
        ),
        migrations.AddIndex(
            model_name='measurement',
            index=models.Index(fields=['benchmark', 'protocol', 'streams', '-finished_at'], include=('source', 'destination', 'throughput_gbps', 'rtt_ms', 'status', 'address_family', 'congestion_control', 'auth'), name='meas_window'),
        ),
    ]
