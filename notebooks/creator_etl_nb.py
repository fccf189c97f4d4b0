"""Shared by the notebooks: a DuckDB connection to the data and the named queries of `queries/`.

The data is either
- the DuckDB warehouse at CREATOR_ETL_WAREHOUSE, defaulting to the demo's output
  (`data/warehouse.duckdb` at the repository root, what `cargo run --locked -- demo` writes); or
- the shared lake at CREATOR_ETL_LAKE (`file:///path` or `s3://bucket/prefix`, with the standard
  AWS variables), read with `deltalake` and queried by DuckDB over Arrow. CREATOR_ETL_ORG picks
  one organization; the views then have the warehouse's columns, as `creator-etl query --org`.

The SQL is read from `queries/`, never copied into a notebook.
"""

import os
import pathlib

import duckdb
import polars as pl

REPO = pathlib.Path(__file__).resolve().parent.parent
QUERIES = REPO / "queries"
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
SOURCE = f"lake {LAKE}" + (f", organization {ORG}" if ORG else "") if LAKE else f"warehouse {WAREHOUSE}"


def connect() -> duckdb.DuckDBPyConnection:
    """A read-only view of the data, in UTC, like `creator-etl query`."""
    if LAKE:
        return _connect_lake()
    if not pathlib.Path(WAREHOUSE).is_file():
        raise FileNotFoundError(
            f"no warehouse at {WAREHOUSE}: run `cargo run --locked -- demo` first, "
            "or set CREATOR_ETL_WAREHOUSE to your warehouse.duckdb (or CREATOR_ETL_LAKE to a lake)"
        )
    con = duckdb.connect(WAREHOUSE, read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    return con


def _connect_lake() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with one view per lake table, over each table's current snapshot."""
    from deltalake import DeltaTable

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET autoinstall_known_extensions = false")
    organizations = set()
    partitions = {}
    for table in LAKE_TABLES:
        dt = DeltaTable(f"{LAKE}/{table}")
        partitions[table] = dt.metadata().partition_columns
        # A pyarrow dataset: DuckDB scans it over Arrow and pushes the organization filter down.
        con.register(f"lake_{table}", dt.to_pyarrow_dataset())
        organizations |= {row[0] for row in con.sql(f"SELECT DISTINCT organization FROM lake_{table}").fetchall()}
    if ORG is None and len(organizations) > 1:
        raise ValueError(
            f"the lake holds {len(organizations)} organizations ({', '.join(sorted(organizations))}); "
            "the named queries are per organization: set CREATOR_ETL_ORG"
        )
    if ORG is not None and ORG not in organizations:
        raise ValueError(f"CREATOR_ETL_ORG={ORG}: the lake holds no rows of it ({', '.join(sorted(organizations))})")
    for table in LAKE_TABLES:
        if ORG is None:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM lake_{table}")
        else:
            literal = ORG.replace("'", "''")
            hidden = ", ".join(partitions[table])
            con.execute(
                f"CREATE VIEW {table} AS SELECT * EXCLUDE ({hidden}) FROM lake_{table} WHERE organization = '{literal}'"
            )
    if ORG is not None:
        # The warehouse's own views over those tables (`cohort_acceptance`), from the same file.
        con.execute((REPO / "src" / "load" / "views.sql").read_text())
    return con


def query(con: duckdb.DuckDBPyConnection, name: str, **params) -> pl.DataFrame:
    """Runs `queries/<name>.sql` with its parameters (DuckDB variables, as the CLI sets them)."""
    sql = (QUERIES / f"{name}.sql").read_text()
    for key, value in params.items():
        if not key.isidentifier():
            raise ValueError(f"parameter name {key!r} is not an identifier")
        literal = str(value).replace("'", "''")
        con.execute(f"SET VARIABLE {key} = '{literal}'")
    try:
        return con.sql(sql).pl()
    finally:
        for key in params:
            con.execute(f"RESET VARIABLE {key}")
