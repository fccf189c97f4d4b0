-- cohort_acceptance: applications per post-count bucket, with the acceptance rate
-- accepted / (accepted + rejected); NULL where neither happened yet.
-- params: (none)
-- columns: bucket, bucket_min, bucket_max, applications, creators, accepted, rejected, pending, acceptance_rate
SELECT bucket, bucket_min, bucket_max,
       CAST(sum(applications) AS BIGINT) AS applications,
       CAST(sum(creators) AS BIGINT) AS creators,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'accepted'), 0) AS BIGINT) AS accepted,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'rejected'), 0) AS BIGINT) AS rejected,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'pending'), 0) AS BIGINT) AS pending,
       CAST(sum(applications) FILTER (WHERE status = 'accepted') AS DOUBLE)
         / nullif(sum(applications) FILTER (WHERE status IN ('accepted', 'rejected')), 0) AS acceptance_rate
FROM post_count_cohorts
GROUP BY bucket, bucket_min, bucket_max
ORDER BY bucket_min NULLS FIRST;
