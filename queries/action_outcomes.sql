-- action_outcomes: rows per actions run, action and outcome, newest run first.
-- params: (none)
-- columns: run_id, finished_at, action, outcome, rows, http_statuses
SELECT organization, run_id, max(finished_at) AS finished_at, action, outcome, count(*) AS rows,
       string_agg(DISTINCT CAST(http_status AS VARCHAR), ', ' ORDER BY CAST(http_status AS VARCHAR)) AS http_statuses
FROM action_results
GROUP BY organization, run_id, action, outcome
ORDER BY organization, finished_at DESC, run_id, action, outcome;
