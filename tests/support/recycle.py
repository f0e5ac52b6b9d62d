"""Test databases copied from the template once and made equal to it again after each test.

``CREATE DATABASE … TEMPLATE`` costs the server about 0.4 s, nearly all of it kernel time (it creates the
~460 files of a database: catalogs, tables, indexes), and ``DROP DATABASE`` removes them again. The
suite has ~800 database tests: in the web and admin tests, the setup took more time than the tests.
:class:`RecycledDatabases` keeps the databases of finished tests instead and brings each back to the
template's state (about half the time of a new copy: emptying the tables a test wrote to still makes
new files for them and for the tables that refer to them):

1. Every connection to it is ended and it is renamed (``ALTER DATABASE … RENAME``, refused while anyone
   is connected): a process or thread a test left behind that reconnects finds no database, as when it
   was dropped, and the next test gets a name no one has used.
2. Tables the test created are dropped (``side_effects``, ``spans``…). Every table whose size or planner
   statistics differ from the template's is emptied (``TRUNCATE … CASCADE``, which also resets them);
   the template's rows (the schema version) are put back; every sequence is set back; the planner
   statistics of ANALYZE and the cumulative statistics (``pg_stat_user_tables``…) are cleared.
3. The database's whole state — schema (tables, columns, defaults, constraints, indexes, triggers,
   functions, types, policies, storage options…), database settings, every user relation's size and
   planner statistics, sequence values, ``pg_statistic``, the template's rows — is compared with the
   template's. Only an equal database is used again; anything else (a test that changed the schema, a
   prepared transaction, a connection that would not end) is dropped and a new copy made, as before.

Each test still starts on a database nobody else uses, in the template's state, under a new name.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

# Namespaces of the database's own objects (the migrations' ``public`` and any a test creates), not the
# system's nor the per-session temporary ones.
USER_NAMESPACES = """
    SELECT oid FROM pg_namespace
    WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
      AND nspname NOT LIKE 'pg\\_temp\\_%' AND nspname NOT LIKE 'pg\\_toast\\_temp\\_%'
"""

USER_RELATIONS = f"SELECT oid FROM pg_class WHERE relnamespace IN ({USER_NAMESPACES})"

# The user relations with their TOAST tables and the TOAST tables' indexes.
WITH_TOAST = f"""
    SELECT oid FROM pg_class WHERE oid IN ({USER_RELATIONS})
    UNION SELECT reltoastrelid FROM pg_class WHERE oid IN ({USER_RELATIONS}) AND reltoastrelid <> 0
    UNION SELECT indexrelid FROM pg_index WHERE indrelid IN (
        SELECT reltoastrelid FROM pg_class WHERE oid IN ({USER_RELATIONS}) AND reltoastrelid <> 0)
"""

# The planner's sizes of those relations (kept by OID: a copy of a database keeps its objects' OIDs).
PLANNER_SIZES = f"SELECT oid, relpages, reltuples, relallvisible FROM pg_class WHERE oid IN ({WITH_TOAST})"

# One line per fact; the sorted lines' hash is the state. Columns common to PostgreSQL 15 (CI) and 18
# (the embedded server).
STATE = f"""
SELECT x FROM (
    SELECT format('ns %s %s %s', nspname, nspowner, nspacl) FROM pg_namespace
        WHERE oid IN ({USER_NAMESPACES})
    UNION ALL SELECT format('rel %s %s %s %s %s %s %s %s %s %s %s %s', c.oid::regclass, relkind,
            relpersistence, reloptions, relacl, relowner, relhastriggers, relhasrules, relrowsecurity,
            relforcerowsecurity, relreplident, relam)
        FROM pg_class c WHERE c.oid IN ({USER_RELATIONS})
    UNION ALL SELECT format('storage %s %s %s %s %s', c.oid::regclass,
            CASE WHEN relkind IN ('r', 'p', 'm') THEN pg_total_relation_size(c.oid)
                 WHEN relkind = 'i' THEN pg_relation_size(c.oid) END,
            relpages, reltuples, relallvisible)
        FROM pg_class c WHERE c.oid IN ({USER_RELATIONS}) AND relkind IN ('r', 'p', 'm', 'i')
    UNION ALL SELECT format('sizes %s %s %s %s %s', oid, pg_relation_size(oid), relpages, reltuples,
            relallvisible)
        FROM pg_class WHERE oid IN ({WITH_TOAST})
    UNION ALL SELECT format('att %s %s %s %s %s %s %s %s %s %s %s', attrelid::regclass, attnum, attname,
            format_type(atttypid, atttypmod), attnotnull, attisdropped, attidentity, attgenerated,
            attoptions, attcollation, attstorage)
        FROM pg_attribute WHERE attrelid IN ({USER_RELATIONS}) AND attnum > 0
    UNION ALL SELECT format('def %s %s %s', adrelid::regclass, adnum, pg_get_expr(adbin, adrelid))
        FROM pg_attrdef WHERE adrelid IN ({USER_RELATIONS})
    UNION ALL SELECT format('con %s %s %s %s %s', conrelid::regclass, contypid::regtype, conname,
            pg_get_constraintdef(oid), convalidated)
        FROM pg_constraint WHERE connamespace IN ({USER_NAMESPACES})
    UNION ALL SELECT format('idx %s %s %s %s %s', indexrelid::regclass, pg_get_indexdef(indexrelid),
            indisvalid, indisready, indisclustered)
        FROM pg_index WHERE indrelid IN ({USER_RELATIONS})
    UNION ALL SELECT format('trg %s %s %s %s', tgrelid::regclass, tgname, tgenabled, pg_get_triggerdef(oid))
        FROM pg_trigger WHERE tgrelid IN ({USER_RELATIONS})
    UNION ALL SELECT format('rule %s %s %s', ev_class::regclass, rulename, md5(pg_get_ruledef(oid)))
        FROM pg_rewrite WHERE ev_class IN ({USER_RELATIONS})
    UNION ALL SELECT format('pol %s %s %s %s', polrelid::regclass, polname,
            pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid))
        FROM pg_policy
    UNION ALL SELECT format('proc %s %s %s %s %s %s', oid::regprocedure, md5(prosrc), proconfig,
            provolatile, prosecdef, proacl)
        FROM pg_proc WHERE pronamespace IN ({USER_NAMESPACES})
    UNION ALL SELECT format('type %s %s', oid::regtype, typtype)
        FROM pg_type WHERE typnamespace IN ({USER_NAMESPACES})
    UNION ALL SELECT format('enum %s %s %s', enumtypid::regtype, enumsortorder, enumlabel) FROM pg_enum
    UNION ALL SELECT format('op %s', oid::regoperator) FROM pg_operator
        WHERE oprnamespace IN ({USER_NAMESPACES})
    UNION ALL SELECT format('coll %s', collname) FROM pg_collation
        WHERE collnamespace IN ({USER_NAMESPACES})
    UNION ALL SELECT format('seq %s %s %s %s %s %s %s %s', seqrelid::regclass, seqtypid::regtype, seqstart,
            seqincrement, seqmax, seqmin, seqcache, seqcycle)
        FROM pg_sequence
    UNION ALL SELECT format('seqval %I.%I %s', schemaname, sequencename, last_value) FROM pg_sequences
    UNION ALL SELECT format('ext %s %s', extname, extversion) FROM pg_extension
    UNION ALL SELECT format('evt %s %s %s', evtname, evtevent, evtenabled) FROM pg_event_trigger
    UNION ALL SELECT format('pub %s', pubname) FROM pg_publication
    UNION ALL SELECT format('stx %s', stxname) FROM pg_statistic_ext
    UNION ALL SELECT format('defacl %s %s %s', defaclrole, defaclobjtype, defaclacl) FROM pg_default_acl
    UNION ALL SELECT format('inh %s %s', inhrelid::regclass, inhparent::regclass) FROM pg_inherits
    UNION ALL SELECT format('lo %s', count(*)) FROM pg_largeobject_metadata
    UNION ALL SELECT format('desc %s', md5(string_agg(d::text, ',' ORDER BY d::text))) FROM pg_description d
    UNION ALL SELECT format('stat %s', md5(string_agg(s::text, ',' ORDER BY s::text))) FROM pg_statistic s
    UNION ALL SELECT format('dbset %s %s', setrole, setconfig) FROM pg_db_role_setting
        WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL SELECT format('db %s %s %s %s', datallowconn, datconnlimit, datacl, datdba)
        FROM pg_database WHERE datname = current_database()
) facts (x) ORDER BY x
"""

# Per table of the database: its size (with its indexes and TOAST) and the planner statistics of it and
# its indexes; a table whose line differs from the template's was written to (or analysed).
TABLES = f"""
SELECT format('%I.%I', n.nspname, c.relname) AS name,
       format('%s %s %s %s %s', pg_total_relation_size(c.oid), c.relpages, c.reltuples, c.relallvisible,
              (SELECT string_agg(format('%s %s %s', i.relpages, i.reltuples, pg_relation_size(i.oid)),
                                 ',' ORDER BY i.relname)
               FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid)) AS shape
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid IN ({USER_RELATIONS}) AND c.relkind IN ('r', 'p')
"""

SEQUENCES = (
    "SELECT format('%I.%I', schemaname, sequencename) AS name, start_value, last_value FROM pg_sequences"
)

_names = itertools.count()


@dataclass
class Template:
    """What the template looks like: its state, its tables' shapes, its rows and its sequences."""

    state: list[str]
    shapes: dict[str, str]
    rows: dict[str, list[asyncpg.Record]]
    sequences: list[tuple[str, int, int | None]]
    sizes: list[asyncpg.Record]


async def describe(conn: asyncpg.Connection) -> Template:
    shapes = {r["name"]: r["shape"] for r in await conn.fetch(TABLES)}
    rows = {}
    for name in shapes:
        found = await conn.fetch(f"SELECT * FROM {name}")
        if found:
            rows[name] = found
    sequences = [(r["name"], r["start_value"], r["last_value"]) for r in await conn.fetch(SEQUENCES)]
    sizes = await conn.fetch(PLANNER_SIZES)
    return Template(await state(conn, rows), shapes, rows, sequences, sizes)


async def state(conn: asyncpg.Connection, rows: dict[str, list[asyncpg.Record]]) -> list[str]:
    facts = [r["x"] for r in await conn.fetch(STATE)]
    for name in rows:  # the template's rows, in a stable order
        facts.append(f"rows {name} " + repr(sorted(map(tuple, await conn.fetch(f"SELECT * FROM {name}")))))
    return facts


class RecycledDatabases:
    """Databases for one test process: :meth:`take` one, :meth:`give_back` it after the test."""

    def __init__(self, admin_dsn: str, dsn_of: Callable[[str], str], template: str, prefix: str) -> None:
        """``dsn_of(name)``: the asyncpg DSN of database ``name``."""
        self.admin_dsn = admin_dsn
        self.dsn_of = dsn_of
        self.template = template
        self.prefix = prefix
        self.free: list[str] = []
        self.shape: Template | None = None

    def _new_name(self) -> str:
        return f"{self.prefix}_r{next(_names)}"

    async def take(self) -> str:
        if self.free:
            return self.free.pop()
        if self.shape is None:
            conn = await asyncpg.connect(self.dsn_of(self.template))
            try:
                self.shape = await describe(conn)
            finally:
                await conn.close()
        name = self._new_name()
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        finally:
            await admin.close()
        return name

    async def give_back(self, name: str) -> None:
        """Bring ``name`` back to the template's state under a new name for a later test, or drop it."""
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            renamed = await self._rename(admin, name)
            try:
                if renamed is not None and await self._reset(admin, renamed):
                    self.free.append(renamed)
                    return
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                pass  # (a lock that would not come, a connection lost…): dropped below, as before
            await admin.execute(f'DROP DATABASE IF EXISTS "{renamed or name}" WITH (FORCE)')
        finally:
            await admin.close()

    async def close(self) -> None:
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            while self.free:
                await admin.execute(f'DROP DATABASE IF EXISTS "{self.free.pop()}" WITH (FORCE)')
        finally:
            await admin.close()

    async def _rename(self, admin: asyncpg.Connection, name: str) -> str | None:
        """End every connection to ``name`` and rename it; ``None`` when connections kept coming."""
        new = self._new_name()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            try:
                await admin.execute(f'ALTER DATABASE "{name}" RENAME TO "{new}"')
                return new
            except asyncpg.InvalidCatalogNameError:  # the test dropped it
                return None
            except asyncpg.ObjectInUseError:  # the ended backends are still on their way out
                await asyncio.sleep(0.01)
        return None

    async def _reset(self, admin: asyncpg.Connection, name: str) -> bool:
        """Make ``name`` equal to the template again; False when it cannot be (it is then dropped)."""
        assert self.shape is not None
        shape = self.shape
        leftovers = await admin.fetchval(
            "SELECT (SELECT count(*) FROM pg_prepared_xacts WHERE database = $1)"
            " + (SELECT count(*) FROM pg_replication_slots WHERE database = $1)",
            name,
        )
        if leftovers:
            return False
        conn = await asyncpg.connect(self.dsn_of(name))
        try:
            async with conn.transaction():
                # tables the test created (and their sequences, indexes, triggers)
                for table in {r["name"] for r in await conn.fetch(TABLES)} - set(shape.shapes):
                    await conn.execute(f"DROP TABLE {table} CASCADE")
                current = {r["name"]: r["shape"] for r in await conn.fetch(TABLES)}
                # written to (or analysed), and the tables with rows of the template's (an update in
                # place leaves their shape as it was)
                emptied = [t for t, s in shape.shapes.items() if current.get(t) != s or t in shape.rows]
                if emptied:
                    await conn.execute(f"TRUNCATE {', '.join(emptied)} RESTART IDENTITY CASCADE")
                for table, rows in shape.rows.items():
                    schema, bare = (part.strip('"') for part in table.split(".", 1))
                    await conn.copy_records_to_table(
                        bare,
                        schema_name=schema,
                        records=[tuple(r) for r in rows],
                        columns=list(rows[0].keys()),
                    )
                for seq, start, last in shape.sequences:
                    await conn.execute(
                        "SELECT setval($1::regclass, $2, $3)",
                        seq,
                        start if last is None else last,
                        last is not None,
                    )
                await conn.execute(f"DELETE FROM pg_statistic WHERE starelid IN ({WITH_TOAST})")
                # TRUNCATE leaves its indexes with unknown sizes (0 pages, -1 rows), a new copy with the
                # template's (1 page, 0 rows): set back what the planner reads
                await conn.execute(
                    "UPDATE pg_class c SET relpages = v.pages, reltuples = v.tuples, relallvisible = v.visible"
                    " FROM unnest($1::oid[], $2::int[], $3::real[], $4::int[]) AS v (id, pages, tuples, visible)"
                    " WHERE c.oid = v.id"
                    " AND (c.relpages, c.reltuples, c.relallvisible) IS DISTINCT FROM (v.pages, v.tuples, v.visible)",
                    *zip(*[tuple(r) for r in shape.sizes], strict=True),
                )
            # the counters of pg_stat_user_tables and pg_stat_database: this session's own flushed, then
            # all cleared (autovacuum, which goes by them, then has nothing to do here, as in a new copy)
            await conn.execute("SELECT pg_stat_force_next_flush()")
            await conn.execute("SELECT pg_stat_reset()")
            if await state(conn, shape.rows) != shape.state:
                return False
            # nobody else came in meanwhile (an autovacuum worker that would change what was checked)
            return not await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> $2",
                name,
                conn.get_server_pid(),
            )
        finally:
            await conn.close()
