--
-- collation_icu: a nondeterministic ICU collation on the name argument is
-- ignored; lease identity is byte equality (anchors-reliability.md B.5,
-- "argument with a nondeterministic ICU collation").
--
-- Needs a server built with ICU; without it this file stops at once
-- (expected/collation_icu_1.out).
--

SELECT EXISTS (SELECT FROM pg_collation WHERE collprovider = 'i') AS have_icu \gset
\if :have_icu
\else
\echo ICU is not available: skipped
\quit
\endif

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;

CREATE COLLATION regress_le_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
-- The collation does what it says: 'JOB' equals 'job' under it.
SELECT 'JOB' = 'job' COLLATE regress_le_ci AS equal_under_ci;

SELECT try_acquire_leader('job', '1 minute', 'lower') AS lower_acquired;
-- Same letters, other case, with the case-insensitive collation: a
-- different lease, acquired by another holder.
SELECT try_acquire_leader('JOB' COLLATE regress_le_ci, '1 minute', 'upper') AS upper_acquired;
SELECT am_leader('JOB' COLLATE regress_le_ci, 'lower') AS lower_leads_upper,
       am_leader('job' COLLATE regress_le_ci, 'lower') AS lower_leads_lower,
       leader_term('JOB' COLLATE regress_le_ci, 'upper') AS upper_term;
SELECT holder FROM current_leader('JOB' COLLATE regress_le_ci);
SELECT name, holder, term FROM leader_election.leases ORDER BY name COLLATE "C";
-- Holders too are compared byte-wise.
SELECT am_leader('job', 'LOWER' COLLATE regress_le_ci) AS wrong_case_holder_leads;
SELECT release_leader('job', 'LOWER' COLLATE regress_le_ci) AS wrong_case_holder_released;

DROP COLLATION regress_le_ci;
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
