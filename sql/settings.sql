--
-- settings: leader_election.holder_id (any user), history_max_terms and
-- max_names_per_role (superuser only), and how a bad holder_id is refused
-- (DESIGN.md section 2 "Holder identity").  Their effects are tested in
-- api (holder_id), history_notify (history_max_terms) and privileges
-- (max_names_per_role).
--

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

-- Load the library so its settings are defined.
SELECT am_leader('settings', 'h') AS loaded;
SELECT name, setting, boot_val, context, vartype, min_val, max_val
  FROM pg_settings WHERE name LIKE 'leader_election.%' ORDER BY name;

-- holder_id: the same rules as a holder argument, checked by SET (22023).
\set VERBOSITY sqlstate
SET leader_election.holder_id = 'session:1:2';
SET leader_election.holder_id = 'session:';
SET leader_election.holder_id = E'a\nb';
SET leader_election.holder_id = E'a\x7fb';
SET leader_election.holder_id = U&'a\0085b';
SELECT set_config('leader_election.holder_id', repeat('h', 256), false);
\set VERBOSITY default
SET leader_election.holder_id = 'session:1:2';
SHOW leader_election.holder_id;
-- 255 bytes is fine; empty means "unset": the session identity.
SELECT set_config('leader_election.holder_id', repeat('h', 255), false) = repeat('h', 255) AS set_255;
SELECT try_acquire_leader('settings', '1 minute') AS acquired;
SELECT holder = repeat('h', 255) AS setting_used, session_bound FROM current_leader('settings');
SET leader_election.holder_id = '';
SELECT try_acquire_leader('settings-empty', '1 minute') AS acquired;
SELECT holder LIKE 'session:%' AS session_holder, session_bound FROM current_leader('settings-empty');
-- Scoped like any setting: SET LOCAL ends with the transaction.
BEGIN;
SET LOCAL leader_election.holder_id = 'local-holder';
SELECT try_acquire_leader('settings-local', '1 minute') AS acquired;
COMMIT;
SHOW leader_election.holder_id;
SELECT holder FROM current_leader('settings-local');
-- Per role, as pooled connections would use it: the role's setting
-- applies to its new sessions.
SELECT current_user AS superuser_name \gset
CREATE ROLE regress_le_setting_role LOGIN;
GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text)
   TO regress_le_setting_role;
ALTER ROLE regress_le_setting_role SET leader_election.holder_id = 'role-holder';
\c - regress_le_setting_role
SHOW leader_election.holder_id;
SELECT try_acquire_leader('settings-role', '1 minute') AS acquired,
       am_leader('settings-role', 'role-holder') AS role_holder_leads;
\c - :superuser_name
SELECT holder, session_bound, owner FROM leader_election.leaders WHERE name = 'settings-role';
ALTER ROLE regress_le_setting_role RESET leader_election.holder_id;
RESET leader_election.holder_id;

-- The superuser-only settings: bounds.
\set VERBOSITY sqlstate
SET leader_election.history_max_terms = -1;
SET leader_election.max_names_per_role = -1;
\set VERBOSITY default
SET leader_election.history_max_terms = -1;
SET leader_election.history_max_terms = 0;
SET leader_election.max_names_per_role = 1;
RESET leader_election.history_max_terms;
RESET leader_election.max_names_per_role;
-- Ordinary roles may set holder_id but not the others.
SET ROLE regress_le_setting_role;
SET leader_election.holder_id = 'from-role';
SHOW leader_election.holder_id;
\set VERBOSITY sqlstate
SET leader_election.history_max_terms = 5;
SET leader_election.max_names_per_role = 5;
\set VERBOSITY default
RESET ROLE;
RESET leader_election.holder_id;

REVOKE ALL ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text)
   FROM regress_le_setting_role;
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
DROP ROLE regress_le_setting_role;
