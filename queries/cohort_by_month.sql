-- cohort_by_month: applications per applied month and post-count bucket, with the acceptance rate
-- accepted / (accepted + rejected) of each cell; the grid behind the cohort heatmap.
-- params: months (default 24)
-- columns: applied_month, bucket, bucket_min, applications, accepted, rejected, acceptance_rate
WITH c AS (
    SELECT *, max(applied_month) OVER (PARTITION BY organization) AS latest FROM post_count_cohorts
)
SELECT organization, applied_month, bucket, bucket_min,
       CAST(sum(applications) AS BIGINT) AS applications,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'accepted'), 0) AS BIGINT) AS accepted,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'rejected'), 0) AS BIGINT) AS rejected,
       CAST(sum(applications) FILTER (WHERE status = 'accepted') AS DOUBLE)
         / nullif(sum(applications) FILTER (WHERE status IN ('accepted', 'rejected')), 0) AS acceptance_rate
FROM c
WHERE applied_month > latest - to_months(coalesce(CAST(getvariable('months') AS INTEGER), 24))
GROUP BY organization, applied_month, bucket, bucket_min
ORDER BY organization, applied_month, bucket_min NULLS FIRST;
