-- run_health: the last N loaded runs: duration, requests, retries, 429s, pacing waits, warnings,
-- and how each read the applications (quick or full, pages verified, counts agreeing). Newest
-- first; runs loaded together share finished_at, and the one that started last comes first.
-- Runs loaded before schema version 4 (and so without a mode) were full syncs.
-- params: runs (default 20)
-- columns: run_id, started_at, finished_at, status, duration_s, requests, retries, rate_limited, pacing_wait_s, status_changes, warnings, parquet_exported, sync_mode, pages_verified, counts_agree, last_reconcile_at
SELECT organization, run_id, started_at, finished_at, status,
       round(date_diff('millisecond', CAST(coalesce(started_at, finished_at) AS TIMESTAMP),
                       CAST(finished_at AS TIMESTAMP)) / 1000.0, 1) AS duration_s,
       requests, retries, rate_limited,
       round(pacing_wait_ms / 1000.0, 1) AS pacing_wait_s,
       status_changes,
       warnings,
       parquet_exported,
       coalesce(sync_mode, 'full') AS sync_mode, pages_verified, counts_agree, last_reconcile_at
FROM runs
QUALIFY row_number() OVER (PARTITION BY organization ORDER BY finished_at DESC, started_at DESC NULLS LAST, run_id DESC)
        <= coalesce(CAST(getvariable('runs') AS INTEGER), 20)
ORDER BY organization, finished_at DESC, started_at DESC NULLS LAST, run_id DESC;
