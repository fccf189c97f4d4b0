-- pending_queue: the work queue. Pending applications per campaign, by how long they have waited.
-- Age is counted from applied_at to the last load (not to now), so the numbers match the data.
-- params: (none)
-- columns: campaign_id, campaign_name, pending, under_7d, from_7_to_30d, over_30d, oldest_applied_at, median_age_days
WITH a AS (
    SELECT organization, campaign_id, campaign_name, applied_at, status,
           max(CAST(last_seen_at AS TIMESTAMP)) OVER (PARTITION BY organization) AS last_load
    FROM applications
), p AS (
    SELECT organization, campaign_id, campaign_name, applied_at,
           date_diff('day', CAST(applied_at AS TIMESTAMP), last_load) AS age_days
    FROM a
    WHERE status = 'pending'
)
SELECT organization, campaign_id, campaign_name,
       count(*) AS pending,
       count(*) FILTER (WHERE age_days < 7) AS under_7d,
       count(*) FILTER (WHERE age_days >= 7 AND age_days <= 30) AS from_7_to_30d,
       count(*) FILTER (WHERE age_days > 30) AS over_30d,
       min(applied_at) AS oldest_applied_at,
       CAST(median(age_days) AS DOUBLE) AS median_age_days
FROM p
GROUP BY organization, campaign_id, campaign_name
ORDER BY organization, pending DESC, campaign_id;
