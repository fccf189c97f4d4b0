-- cohort_acceptance: applications per post-count bucket, with the acceptance rate
-- accepted / (accepted + rejected); NULL where neither happened yet. The warehouse's view of the
-- same name holds the definition.
-- params: (none)
-- columns: bucket, bucket_min, bucket_max, applications, creators, accepted, rejected, pending, acceptance_rate
SELECT organization, bucket, bucket_min, bucket_max, applications, creators, accepted, rejected, pending, acceptance_rate
FROM cohort_acceptance
ORDER BY organization, bucket_min NULLS FIRST;
