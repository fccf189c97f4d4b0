"""Shared by the notebooks: a DuckDB connection to the data and the named queries of `queries/`.

The data is either
- the DuckDB warehouse at CREATOR_ETL_WAREHOUSE, defaulting to the demo's output
  (`data/warehouse.duckdb` at the repository root, what `cargo run --locked -- demo` writes); or
- the shared lake at CREATOR_ETL_LAKE (`file:///path` or `s3://bucket/prefix`, with the standard
  AWS variables), read with `deltalake` and queried by DuckDB over Arrow. CREATOR_ETL_ORG picks
  one organization.

A fleet's warehouse (`fleet run --warehouse fleet`, every table with `organization`) is read
like the lake: CREATOR_ETL_ORG picks one organization; without it, a fleet warehouse of one
organization is read whole, and one of several is refused (a notebook shows one organization).

The named queries are written with `organization` as a key, so the connection's views are what
`creator-etl query` gives them: every table with `organization` (empty for one organization's own
warehouse), and the warehouse's views over them. `query` leaves the key out of its answer.

The SQL is read from `queries/`, never copied into a notebook.
"""

import os
import pathlib

import duckdb
import polars as pl

REPO = pathlib.Path(__file__).resolve().parent.parent
QUERIES = REPO / "queries"
VIEWS_SQL = REPO / "src" / "load" / "catalog" / "views.sql"
WAREHOUSE = os.environ.get("CREATOR_ETL_WAREHOUSE", str(REPO / "data" / "warehouse.duckdb"))
LAKE = os.environ.get("CREATOR_ETL_LAKE", "").rstrip("/") or None
ORG = os.environ.get("CREATOR_ETL_ORG") or None
# The lake's tables (creator-etl's `load::lake::tables()`; a test keeps the two lists equal).
LAKE_TABLES = [
    "applications",
    "connected_accounts",
    "content_daily",
    "wow_deltas",
    "weekly_totals",
    "post_count_cohorts",
    "application_status_history",
    "action_results",
    "runs",
]


def _shown(path: str) -> str:
    """A path as the notebooks print it: relative to the repository when inside it, so the
    committed outputs name `data/warehouse.duckdb` rather than a machine's directory."""
    try:
        return str(pathlib.Path(path).resolve().relative_to(REPO))
    except ValueError:
        return path


SOURCE = (f"lake {LAKE}" if LAKE else f"warehouse {_shown(WAREHOUSE)}") + (f", organization {ORG}" if ORG else "")


def connect() -> duckdb.DuckDBPyConnection:
    """A read-only view of the data for the named queries, in UTC, like `creator-etl query`."""
    if LAKE:
        return _connect_lake()
    if not pathlib.Path(WAREHOUSE).is_file():
        raise FileNotFoundError(
            f"no warehouse at {WAREHOUSE}: run `cargo run --locked -- demo` first, "
            "or set CREATOR_ETL_WAREHOUSE to your warehouse.duckdb (or CREATOR_ETL_LAKE to a lake)"
        )
    con = _in_memory()
    path = WAREHOUSE.replace("'", "''")
    con.execute(f"ATTACH '{path}' AS warehouse (READ_ONLY)")
    marker = "SELECT count(*) FROM duckdb_tables() WHERE database_name = 'warehouse' AND table_name = 'fleet_schema_version'"
    if con.execute(marker).fetchall()[0][0] == 0:
        if ORG is not None:
            raise ValueError(
                f"CREATOR_ETL_ORG={ORG}: {WAREHOUSE} is one organization's warehouse; "
                "CREATOR_ETL_ORG picks an organization of a fleet warehouse or a lake"
            )
        # One organization's tables have no `organization`: the views add an empty one.
        present = "SELECT table_name FROM duckdb_tables() WHERE database_name = 'warehouse' AND schema_name = 'main'"
        tables = {row[0] for row in con.execute(present).fetchall()}
        for table in [t for t in LAKE_TABLES if t in tables]:
            con.execute(f"CREATE VIEW {table} AS SELECT '' AS organization, * FROM warehouse.main.{table}")
        con.execute(_views_sql())
        return con
    return _views(con, "warehouse.", {table: ["organization"] for table in LAKE_TABLES}, "the fleet warehouse")


def _connect_lake() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with one view per lake table, over each table's current snapshot."""
    from deltalake import DeltaTable

    con = _in_memory()
    partitions = {}
    for table in LAKE_TABLES:
        dt = DeltaTable(f"{LAKE}/{table}")
        partitions[table] = dt.metadata().partition_columns
        # A pyarrow dataset: DuckDB scans it over Arrow and pushes the organization filter down.
        con.register(f"lake_{table}", dt.to_pyarrow_dataset())
    return _views(con, "lake_", partitions, "the lake")


def _in_memory() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET autoinstall_known_extensions = false")
    return con


def _views(con: duckdb.DuckDBPyConnection, prefix: str, hidden: dict, within: str) -> duckdb.DuckDBPyConnection:
    """One view per table over `<prefix><table>`, which has `organization`: of the organization
    CREATOR_ETL_ORG names, or of every organization, with the table's columns and `organization`
    (without the other columns `hidden` lists for the table: the lake's `year`). A notebook shows
    one organization: CREATOR_ETL_ORG must name one that is there, or there must be at most
    one."""
    organizations = set()
    for table in LAKE_TABLES:
        organizations |= {row[0] for row in con.sql(f"SELECT DISTINCT organization FROM {prefix}{table}").fetchall()}
    if ORG is None and len(organizations) > 1:
        raise ValueError(
            f"{within} holds {len(organizations)} organizations ({', '.join(sorted(organizations))}); "
            "a notebook shows one organization: set CREATOR_ETL_ORG"
        )
    if ORG is not None and ORG not in organizations:
        raise ValueError(f"CREATOR_ETL_ORG={ORG}: {within} holds no rows of it ({', '.join(sorted(organizations))})")
    for table in LAKE_TABLES:
        other = [c for c in hidden[table] if c != "organization"]
        columns = f"* EXCLUDE ({', '.join(other)})" if other else "*"
        where = "" if ORG is None else " WHERE organization = '{}'".format(ORG.replace("'", "''"))
        con.execute(f"CREATE VIEW {table} AS SELECT {columns} FROM {prefix}{table}{where}")
    # The warehouse's own views over those tables (`cohort_acceptance`), from the same file.
    con.execute(_views_sql())
    return con


def _views_sql() -> str:
    """The warehouse's views, keyed by organization as the named queries read them (creator-etl's
    `catalog::views_sql(true)`)."""
    return VIEWS_SQL.read_text().replace("{key}", "organization, ")


def query(con: duckdb.DuckDBPyConnection, name: str, **params) -> pl.DataFrame:
    """Runs `queries/<name>.sql` with its parameters (DuckDB variables, as the CLI sets them)."""
    sql = (QUERIES / f"{name}.sql").read_text()
    for key, value in params.items():
        if not key.isidentifier():
            raise ValueError(f"parameter name {key!r} is not an identifier")
        literal = str(value).replace("'", "''")
        con.execute(f"SET VARIABLE {key} = '{literal}'")
    try:
        # One organization's answer: the key left out, as `creator-etl query` prints it.
        return con.sql(sql).pl().drop("organization")
    finally:
        for key in params:
            con.execute(f"RESET VARIABLE {key}")
