-- applications_by_status: applications per status as of the last load, with their creators and
-- campaigns and when the oldest and newest of them applied.
-- params: (none)
-- columns: status, applications, creators, campaigns, oldest_applied_at, newest_applied_at
SELECT organization, status, count(*) AS applications, count(DISTINCT user_id) AS creators,
       count(DISTINCT campaign_id) AS campaigns,
       min(applied_at) AS oldest_applied_at, max(applied_at) AS newest_applied_at
FROM applications
GROUP BY organization, status
ORDER BY organization, applications DESC, status;
