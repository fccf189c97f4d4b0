-- status_changes: status transitions seen across runs, from the SCD2 history; most recent first.
-- params: days (default 30): only changes seen in the last N days before the newest change
-- columns: id, campaign_name, from_status, to_status, changed_at
WITH t AS (
    SELECT h.organization, h.id,
           lag(h.status) OVER (PARTITION BY h.organization, h.id ORDER BY h.valid_from) AS from_status,
           h.status AS to_status, h.valid_from AS changed_at,
           max(CAST(h.valid_from AS TIMESTAMP)) OVER (PARTITION BY h.organization) AS latest
    FROM application_status_history AS h
)
SELECT t.organization, t.id, a.campaign_name, t.from_status, t.to_status, t.changed_at
FROM t LEFT JOIN applications AS a ON a.organization = t.organization AND a.id = t.id
WHERE t.from_status IS NOT NULL
  AND CAST(t.changed_at AS TIMESTAMP) >= t.latest - to_days(coalesce(CAST(getvariable('days') AS INTEGER), 30))
ORDER BY t.organization, t.changed_at DESC, t.id;
