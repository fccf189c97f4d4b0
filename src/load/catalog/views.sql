-- The warehouse's views over its tables, as of the current schema (version 2 on). The
-- warehouse creates them in its migrations; the lake readers (`creator-etl query --lake`, the
-- notebooks) create them over their views of the lake's tables.
--
-- `{key}` is where the named queries' views (every table with `organization`: see `query`) key
-- each view by organization: it reads `organization, ` there, and nothing in the warehouse and
-- in the views of one organization's rows (`catalog::views_sql`).
CREATE OR REPLACE VIEW cohort_acceptance AS
SELECT {key}bucket, bucket_min, bucket_max,
       CAST(sum(applications) AS BIGINT) AS applications,
       CAST(sum(creators) AS BIGINT) AS creators,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'accepted'), 0) AS BIGINT) AS accepted,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'rejected'), 0) AS BIGINT) AS rejected,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'pending'), 0) AS BIGINT) AS pending,
       CAST(sum(applications) FILTER (WHERE status = 'accepted') AS DOUBLE)
         / nullif(sum(applications) FILTER (WHERE status IN ('accepted', 'rejected')), 0) AS acceptance_rate
FROM post_count_cohorts
GROUP BY {key}bucket, bucket_min, bucket_max;
