--
-- api: the 1.0 lease API in one session (DESIGN.md sections 2 and 3).
--
-- try_acquire_leader (acquire, renew, takeover after expiry), am_leader,
-- leader_term, release_leader (keeps row and term), current_leader, the
-- leaders view, history rows, named vs session identity, the holder_id
-- setting, and every way assert_leader fails (SQLSTATE LE001).
--
-- Output never shows pids or timestamps: only booleans, terms and names.
--

-- Start from an empty state: earlier test files may have left leases.
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

--
-- Acquire, renew, am_leader, leader_term with a named holder.
--
SELECT try_acquire_leader('job', '1 minute', 'host-a') AS acquired;
SELECT am_leader('job', 'host-a') AS a_leads, am_leader('job', 'host-b') AS b_leads,
       am_leader('job') AS session_leads;
SELECT leader_term('job', 'host-a') AS a_term, leader_term('job', 'host-b') AS b_term;
-- Another holder is refused while the lease is valid; that writes nothing.
SELECT try_acquire_leader('job', '1 minute', 'host-b') AS b_acquired;
SELECT try_acquire_leader('job', '1 minute') AS session_acquired;
-- Renewal keeps the term and moves expires_at forward from the call time.
SELECT expires_at AS old_expiry FROM leader_election.leases WHERE name = 'job' \gset
SELECT try_acquire_leader('job', '2 minutes', 'host-a') AS renewed;
SELECT term, holder, expires_at > :'old_expiry' AS expiry_moved,
       expires_at - renewed_at AS ttl, renewed_at > acquired_at AS renewed_later
  FROM leader_election.leases WHERE name = 'job';
-- Calling it twice in one transaction is an idempotent renewal.
BEGIN;
SELECT try_acquire_leader('job', '1 minute', 'host-a') AS first_call,
       leader_term('job', 'host-a') AS term_after_first;
SELECT try_acquire_leader('job', '1 minute', 'host-a') AS second_call,
       leader_term('job', 'host-a') AS term_after_second;
COMMIT;
-- A brand-new name acquired twice in one transaction: one row, term 1.
BEGIN;
SELECT try_acquire_leader('twice', '1 minute', 'host-a') AS first_call;
SELECT try_acquire_leader('twice', '1 minute', 'host-a') AS second_call;
COMMIT;
SELECT name, term, holder FROM leader_election.leases WHERE name = 'twice';
SELECT name, term, holder, end_reason FROM leader_election.history WHERE name = 'twice';

--
-- current_leader: columns and values.
--
SELECT holder, term, session_bound, pid = pg_backend_pid() AS my_pid,
       role = current_user AS my_role,
       application_name IS NOT DISTINCT FROM current_setting('application_name') AS my_app,
       client_addr IS NOT DISTINCT FROM inet_client_addr() AS my_addr,
       renewed_at >= acquired_at AS times_ordered, expires_at > clock_timestamp() AS in_future
  FROM current_leader('job');
-- The result columns, in order.
SELECT p.parameter_name AS column, p.data_type
  FROM information_schema.parameters p
  JOIN information_schema.routines r USING (specific_schema, specific_name)
 WHERE r.routine_name = 'current_leader' AND p.parameter_mode = 'OUT'
 ORDER BY p.ordinal_position;
-- Nobody holds it: no row (never held, and after expiry/release below).
SELECT count(*) AS rows_for_unknown_name FROM current_leader('never-used');

--
-- The leaders view.
--
SELECT name, holder, term, valid, session_bound, holder_role = current_user::regrole AS my_role,
       seconds_left > 30 AND seconds_left <= 60 AS seconds_left_ok,
       coalesce(waiting_candidates, 0) AS waiting, owner = current_user::regrole AS my_name
  FROM leader_election.leaders ORDER BY name;

--
-- Release keeps the row and the term; re-acquiring starts term + 1.
--
SELECT release_leader('job', 'host-b') AS b_released;   -- not the holder
SELECT release_leader('job', 'host-a') AS a_released;
SELECT release_leader('job', 'host-a') AS a_released_again;
SELECT am_leader('job', 'host-a') AS a_leads, leader_term('job', 'host-a') AS a_term;
SELECT name, holder, term FROM leader_election.leases WHERE name = 'job';
SELECT count(*) AS current_leader_rows FROM current_leader('job');
SELECT name, holder, term, valid, seconds_left FROM leader_election.leaders WHERE name = 'job';
SELECT try_acquire_leader('job', '1 minute', 'host-b') AS b_acquired;
SELECT holder, term FROM current_leader('job');
SELECT name, term, holder, session_bound, ended_at IS NOT NULL AS ended, end_reason
  FROM leader_election.history WHERE name = 'job' ORDER BY term;

--
-- Session identity: no holder argument and no holder_id setting.
--
SELECT try_acquire_leader('session-job', '1 minute') AS acquired;
SELECT am_leader('session-job') AS i_lead, leader_term('session-job') AS my_term;
SELECT holder LIKE 'session:%' AS session_holder,
       holder ~ ('^session:' || pg_backend_pid() || ':[0-9]+@[0-9]+\.[0-9]+$') AS pid_in_identity,
       session_bound
  FROM current_leader('session-job');
SELECT holder LIKE 'session:%' AS session_holder, session_bound, valid
  FROM leader_election.leaders WHERE name = 'session-job';
-- The session identity is not a valid explicit holder (22023), so nobody
-- else can pose as this session.
SELECT pg_temp.try_with_detail(format('SELECT am_leader(%L, %L)', 'session-job', holder))
  FROM current_leader('session-job');
-- A named holder is a different identity from the session.
SELECT am_leader('session-job', 'host-a') AS host_a_leads;
SELECT release_leader('session-job') AS released;
SELECT name, term, session_bound, holder LIKE 'session:%' AS session_holder, end_reason
  FROM leader_election.history WHERE name = 'session-job';

--
-- leader_election.holder_id: the identity used when no holder is given.
--
SET leader_election.holder_id = 'svc-1';
SELECT try_acquire_leader('setting-job', '1 minute') AS acquired;
SELECT am_leader('setting-job') AS leads_by_setting,
       am_leader('setting-job', 'svc-1') AS leads_by_argument,
       leader_term('setting-job') AS term;
SELECT holder, session_bound FROM current_leader('setting-job');
-- The explicit argument wins over the setting.
SELECT try_acquire_leader('setting-job', '1 minute', 'svc-2') AS svc2_acquired;
RESET leader_election.holder_id;
SELECT am_leader('setting-job') AS session_leads,
       am_leader('setting-job', 'svc-1') AS svc1_leads;

--
-- Expiry and takeover: a 100 ms lease lapses; another holder takes term+1.
--
SELECT try_acquire_leader('short', '100ms', 'host-a') AS acquired;
SELECT pg_temp.wait_until_expired('short');
SELECT am_leader('short', 'host-a') AS a_leads_after_expiry,
       leader_term('short', 'host-a') AS a_term_after_expiry;
SELECT count(*) AS current_leader_rows FROM current_leader('short');
SELECT valid, seconds_left FROM leader_election.leaders WHERE name = 'short';
-- The holder of an expired lease nobody took over renews it: same term.
SELECT try_acquire_leader('short', '100ms', 'host-a') AS a_renewed;
SELECT holder, term FROM leader_election.leases WHERE name = 'short';
SELECT pg_temp.wait_until_expired('short');
-- Now host-b takes it over: term 2, and history records term 1 as expired
-- at its expires_at.
SELECT expires_at AS old_expiry FROM leader_election.leases WHERE name = 'short' \gset
SELECT try_acquire_leader('short', '1 minute', 'host-b') AS b_acquired;
SELECT holder, term FROM current_leader('short');
SELECT am_leader('short', 'host-a') AS a_leads;
SELECT term, holder, end_reason, ended_at = :'old_expiry' AS ended_at_expiry
  FROM leader_election.history WHERE name = 'short' ORDER BY term;
-- host-a's release of a lease it lost does nothing.
SELECT release_leader('short', 'host-a') AS a_released;
SELECT holder, term FROM leader_election.leases WHERE name = 'short';

--
-- assert_leader: returns the term on success, LE001 in every other case.
--
SELECT assert_leader('short', NULL, 'host-b') AS fenced_term;
SELECT leader_term('short', 'host-b') AS b_term \gset
SELECT assert_leader('short', :b_term, 'host-b') = :b_term AS fenced_in_b_term;
-- Named arguments work as documented.
SELECT assert_leader(name => 'short', term => :b_term, holder => 'host-b') = :b_term AS fenced_in_b_term;
-- not the holder
SELECT pg_temp.try_with_detail($$SELECT assert_leader('short', NULL, 'host-a')$$) AS not_holder;
-- wrong term
SELECT pg_temp.try_with_detail(format($$SELECT assert_leader('short', %s, 'host-b')$$, :b_term - 1)) AS wrong_term;
SELECT pg_temp.try_with_detail(format($$SELECT assert_leader('short', %s, 'host-b')$$, :b_term + 1)) AS future_term;
-- never held
SELECT pg_temp.try_with_detail($$SELECT assert_leader('never-held', NULL, 'host-b')$$) AS never_held;
-- released
SELECT release_leader('short', 'host-b') AS b_released;
SELECT pg_temp.try_with_detail(format($$SELECT assert_leader('short', %s, 'host-b')$$, :b_term)) AS after_release;
-- expired (and not taken over)
SELECT try_acquire_leader('fence-expiry', '100ms', 'host-a') AS acquired;
SELECT leader_term('fence-expiry', 'host-a') AS e_term \gset
SELECT pg_temp.wait_until_expired('fence-expiry');
SELECT pg_temp.try_with_detail(format($$SELECT assert_leader('fence-expiry', %s, 'host-a')$$, :e_term)) AS expired;
-- session identity: fails for a name held by a named holder
SELECT try_acquire_leader('fence-session', '1 minute') AS acquired;
SELECT assert_leader('fence-session') AS session_fenced_term;
SELECT pg_temp.try_with_detail($$SELECT assert_leader('fence-session', NULL, 'host-a')$$) AS other_holder;
-- A failed assert_leader aborts the caller's transaction: the fenced work
-- cannot commit.
CREATE TEMP TABLE effects (term bigint);
BEGIN;
INSERT INTO effects VALUES (1);
SELECT assert_leader('short', :b_term, 'host-b');
COMMIT;
SELECT count(*) AS effects_committed FROM effects;
-- A successful one lets it commit.
BEGIN;
INSERT INTO effects SELECT assert_leader('fence-session');
COMMIT;
SELECT term FROM effects;

--
-- Returned types, as documented.
--
SELECT pg_typeof(try_acquire_leader('types', '1 minute', 'host-a')) AS try_acquire_leader,
       pg_typeof(am_leader('types', 'host-a')) AS am_leader,
       pg_typeof(leader_term('types', 'host-a')) AS leader_term,
       pg_typeof(assert_leader('types', NULL, 'host-a')) AS assert_leader,
       pg_typeof(wait_for_leadership('types', '1 minute', '0', 'host-a')) AS wait_for_leadership,
       pg_typeof(release_leader('types', 'host-a')) AS release_leader;

--
-- wait_for_leadership in one session: free lease -> true at once; held by
-- someone else -> false once the timeout passes.
--
SELECT wait_for_leadership('waited', '1 minute', '0', 'host-a') AS got_free_lease;
SELECT wait_for_leadership('waited', '1 minute', NULL, 'host-a') AS renewed_forever_timeout;
SELECT clock_timestamp() AS before_wait \gset
SELECT wait_for_leadership('waited', '1 minute', '50 ms', 'host-b') AS b_got_it;
SELECT clock_timestamp() - :'before_wait' >= interval '50 ms' AS waited_the_timeout;
SELECT wait_for_leadership('waited', '1 minute', '0', 'host-b') AS b_got_it_timeout_0;
-- Waiting out an expiring lease: host-b gets it after host-a's 100 ms lease.
SELECT try_acquire_leader('wait-expiry', '100ms', 'host-a') AS a_acquired;
SELECT wait_for_leadership('wait-expiry', '1 minute', '10 seconds', 'host-b') AS b_got_it;
SELECT holder, term FROM current_leader('wait-expiry');
SELECT term, holder, end_reason FROM leader_election.history
 WHERE name = 'wait-expiry' ORDER BY term;

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
