-- The warehouse's views over its tables, as of the current schema (version 2 on). The
-- warehouse creates them in its migrations; the lake readers (`creator-etl query --lake`, the
-- notebooks) create them over their views of the lake's tables.
--
-- Written to serve both shapes: grouped by every column of `post_count_cohorts` but the month,
-- the status and the counts (GROUP BY ALL over `* EXCLUDE`), which is the bucket, and also
-- `organization` where the tables have it (the named queries' views: see `query`).
CREATE OR REPLACE VIEW cohort_acceptance AS
SELECT * EXCLUDE (applied_month, status, applications, creators, accounts, total_monthly_posts),
       CAST(sum(applications) AS BIGINT) AS applications,
       CAST(sum(creators) AS BIGINT) AS creators,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'accepted'), 0) AS BIGINT) AS accepted,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'rejected'), 0) AS BIGINT) AS rejected,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'pending'), 0) AS BIGINT) AS pending,
       CAST(sum(applications) FILTER (WHERE status = 'accepted') AS DOUBLE)
         / nullif(sum(applications) FILTER (WHERE status IN ('accepted', 'rejected')), 0) AS acceptance_rate
FROM post_count_cohorts
GROUP BY ALL;
