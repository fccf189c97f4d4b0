"""Shared by the notebooks: the warehouse connection and the named queries of `queries/`.

The warehouse path comes from CREATOR_ETL_WAREHOUSE, defaulting to the demo's output
(`data/warehouse.duckdb` at the repository root, what `cargo run --release -- demo` writes).
The SQL is read from `queries/`, never copied into a notebook.
"""

import os
import pathlib

import duckdb
import polars as pl

REPO = pathlib.Path(__file__).resolve().parent.parent
QUERIES = REPO / "queries"
WAREHOUSE = os.environ.get("CREATOR_ETL_WAREHOUSE", str(REPO / "data" / "warehouse.duckdb"))


def connect() -> duckdb.DuckDBPyConnection:
    """A read-only connection, in UTC, like `creator-etl query`."""
    if not pathlib.Path(WAREHOUSE).is_file():
        raise FileNotFoundError(
            f"no warehouse at {WAREHOUSE}: run `cargo run --release -- demo` first, "
            "or set CREATOR_ETL_WAREHOUSE to your warehouse.duckdb"
        )
    con = duckdb.connect(WAREHOUSE, read_only=True)
    con.execute("SET TimeZone = 'UTC'")
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
