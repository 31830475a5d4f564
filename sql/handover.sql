--
-- handover: leader info, hand-over, move_leader and the priority argument
-- (issue 15; lease.c I9-I11, leader_info.c, handover.c, waiters.c).
--
-- set_leader_info: only the valid holder publishes (false otherwise, 42501
-- for another role), current_leader and the leaders view show it, any
-- change of holder clears it, the size limit (54000).  release_leader with
-- a successor and move_leader: the reservation (only the successor, or
-- anyone but the moved holder, until one ttl has passed), history's end
-- reason moved, NOTIFY events handed_over, moved and info.
--
TRUNCATE leader_election.leases, leader_election.history,
         leader_election.leader_info, leader_election.handovers;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;
-- Every event of this session is sent in its own transaction: one sent by
-- the notifier worker (notify_delivery = background) could still arrive
-- after the LISTEN below, or print after a later query.  The notifier's
-- delivery of these events: test/t/014_notify_storm.pl.
SET leader_election.notify_delivery = in_transaction;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

--
-- Leader info.
--
SELECT try_acquire_leader('svc', '1 minute', 'host-a') AS acquired;
SELECT set_leader_info('svc', '{"url": "http://host-a:8080", "version": "1.4"}', 'host-a') AS published;
SELECT holder, info FROM current_leader('svc');
SELECT name, holder, info FROM leader_election.leaders WHERE name = 'svc';
-- Not the holder: false, nothing changes.
SELECT set_leader_info('svc', '{"url": "http://host-b"}', 'host-b') AS b_published;
SELECT set_leader_info('never-used', '{}', 'host-a') AS unknown_name;
SELECT info FROM current_leader('svc');
-- Replacing it, then NULL clears it.
SELECT set_leader_info('svc', '{"url": "http://host-a:9090"}', 'host-a') AS replaced;
SELECT info FROM current_leader('svc');
SELECT set_leader_info('svc', NULL, 'host-a') AS cleared;
SELECT info IS NULL AS info_is_null FROM current_leader('svc');
-- Any change of holder clears it: a release, then the same holder again.
SELECT set_leader_info('svc', '{"url": "http://host-a:8080"}', 'host-a') AS published;
SELECT release_leader('svc', 'host-a') AS released;
SELECT info FROM leader_election.leaders WHERE name = 'svc';
SELECT try_acquire_leader('svc', '1 minute', 'host-a') AS reacquired;
SELECT info IS NULL AS info_cleared FROM current_leader('svc');
SELECT info FROM leader_election.leaders WHERE name = 'svc';
-- A renewal keeps it.
SELECT set_leader_info('svc', '"just a string"', 'host-a') AS published;
SELECT try_acquire_leader('svc', '1 minute', 'host-a') AS renewed;
SELECT info FROM current_leader('svc');
-- An expired holder may not publish.
SELECT try_acquire_leader('short', '100ms', 'host-a') AS acquired;
SELECT pg_temp.wait_until_expired('short');
SELECT set_leader_info('short', '{}', 'host-a') AS expired_holder_published;
-- The size limit: 4096 bytes of text form.
SELECT set_leader_info('svc', jsonb_build_object('pad', repeat('x', 4085)), 'host-a') AS at_limit;
SELECT length(info::text) AS info_bytes FROM current_leader('svc');
SELECT pg_temp.try($$SELECT set_leader_info('svc', jsonb_build_object('pad', repeat('x', 4086)), 'host-a')$$) AS over_limit;
SELECT length(info::text) AS info_bytes_unchanged FROM current_leader('svc');
-- Bad input.
SELECT pg_temp.try($$SELECT set_leader_info(NULL, '{}', 'host-a')$$) AS null_name;
SELECT pg_temp.try($$SELECT set_leader_info('svc', '{}', 'session:1:2@3.4')$$) AS session_holder;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT set_leader_info('svc', '{}', 'host-a')$$) AS read_only;
ROLLBACK;

--
-- Hand-over: release_leader with a successor.
--
SELECT try_acquire_leader('job', '1 minute', 'host-a') AS acquired;
SELECT leader_term('job', 'host-a') AS term_a;
SELECT release_leader('job', 'host-a', 'host-b') AS handed_over;
SELECT holder, term FROM leader_election.leases WHERE name = 'job';
SELECT term, previous_holder, successor, reason,
       reserved_until - now() BETWEEN interval '55 seconds' AND interval '61 seconds' AS one_ttl
  FROM leader_election.handovers WHERE name = 'job';
-- Anyone else, the previous holder included, is refused until it lapses.
SELECT try_acquire_leader('job', '1 minute', 'host-c') AS c_acquired;
SELECT try_acquire_leader('job', '1 minute', 'host-a') AS a_acquired;
SELECT try_acquire_leader('job', '1 minute') AS session_acquired;
-- The successor takes it: a new term, the reservation is spent.
SELECT try_acquire_leader('job', '1 minute', 'host-b') AS b_acquired;
SELECT holder FROM current_leader('job');
SELECT try_acquire_leader('job', '1 minute', 'host-c') AS c_still_refused;
-- The reservation lasts one ttl of the released lease, then anyone may.
SELECT try_acquire_leader('quick', '100ms', 'host-a') AS acquired;
SELECT release_leader('quick', 'host-a', 'host-b') AS handed_over;
SELECT try_acquire_leader('quick', '1 minute', 'host-c') AS c_refused;
DO $$
BEGIN
    WHILE clock_timestamp() <= (SELECT reserved_until FROM leader_election.handovers
                                 WHERE name = 'quick') LOOP
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
SELECT try_acquire_leader('quick', '1 minute', 'host-c') AS c_after_lapse;
-- A plain release reserves nothing.
SELECT try_acquire_leader('plain', '1 minute', 'host-a') AS acquired;
SELECT release_leader('plain', 'host-a') AS released;
SELECT count(*) AS reservations FROM leader_election.handovers WHERE name = 'plain';
SELECT try_acquire_leader('plain', '1 minute', 'host-c') AS c_acquired;
-- Bad successors.
SELECT try_acquire_leader('bad', '1 minute', 'host-a') AS acquired;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', '')$$) AS empty_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', E'a\nb')$$) AS control_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', repeat('s', 256))$$) AS long_successor;
-- The releasing holder as its own successor, and session identities that
-- current_leader() could never show: refused, and the lease stays held.
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'host-a')$$) AS self_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:')$$) AS bare_session_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:host-b')$$) AS named_session_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:34@5')$$) AS no_timeline_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session: 12:34')$$) AS spaced_session_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:34@5.1x')$$) AS trailing_session_successor;
SELECT pg_temp.try($$SELECT leader_election.move_leader('bad', 'session:-1:34@5.1')$$) AS negative_pid_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:012:34@5.1')$$) AS leading_zero_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:2147483648:34@5.1')$$) AS pid_range_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:9223372036854775808@5.1')$$) AS start_range_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:34@18446744073709551616.1')$$) AS sysid_range_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:34@5.0')$$) AS timeline_zero_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:-0@5.1')$$) AS minus_zero_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:-34@5.1')$$) AS negative_start_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:0@5.1')$$) AS zero_start_successor;
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:34@0.1')$$) AS zero_sysid_successor;
-- 1.0's form, without the server part: no session of this library has it.
SELECT pg_temp.try($$SELECT release_leader('bad', 'host-a', 'session:12:34')$$) AS old_form_successor;
SELECT count(*) AS reservations FROM leader_election.handovers WHERE name = 'bad';
-- Well-formed session identities are accepted as successors: this
-- session's own, and one on the highest timeline there can be.
SELECT try_acquire_leader('to-session', '1 minute', 'host-a') AS acquired;
SELECT release_leader('to-session', 'host-a', 'session:12:34@5.4294967295') AS handed_to_session;
SELECT try_acquire_leader('to-own-session', '1 minute', 'host-a') AS acquired;
SELECT holder AS me FROM (SELECT try_acquire_leader('whoami', '1 minute')) t, current_leader('whoami') \gset
SELECT release_leader('to-own-session', 'host-a', :'me') AS handed_to_own_session;
SELECT name, CASE successor WHEN :'me' THEN 'this session' ELSE successor END AS successor
  FROM leader_election.handovers
 WHERE name IN ('to-session', 'to-own-session') ORDER BY name;
SELECT holder FROM current_leader('bad');

--
-- move_leader.
--
SELECT try_acquire_leader('moved', '1 minute', 'host-a') AS acquired;
SELECT set_leader_info('moved', '{"url": "a"}', 'host-a') AS published;
SELECT leader_election.move_leader('moved') AS moved;
SELECT am_leader('moved', 'host-a') AS a_leads, leader_term('moved', 'host-a') AS a_term;
SELECT pg_temp.try($$SELECT assert_leader('moved', NULL, 'host-a')$$) AS a_asserts;
SELECT count(*) AS current_leader_rows FROM current_leader('moved');
SELECT holder, info FROM leader_election.leaders WHERE name = 'moved';
SELECT holder, end_reason FROM leader_election.history WHERE name = 'moved' ORDER BY term;
-- Without a successor: the moved holder's next try is refused, anyone else may.
SELECT try_acquire_leader('moved', '1 minute', 'host-a') AS a_again;
SELECT try_acquire_leader('moved', '1 minute', 'host-b') AS b_acquired;
SELECT holder, end_reason FROM leader_election.history WHERE name = 'moved' ORDER BY term;
-- With a successor: only the successor.
SELECT leader_election.move_leader('moved', 'host-c') AS moved_to_c;
SELECT try_acquire_leader('moved', '1 minute', 'host-b') AS b_again;
SELECT try_acquire_leader('moved', '1 minute', 'host-a') AS a_refused;
SELECT try_acquire_leader('moved', '1 minute', 'host-c') AS c_acquired;
SELECT holder, end_reason FROM leader_election.history WHERE name = 'moved' ORDER BY term;
-- Nobody holds it: false.
SELECT release_leader('moved', 'host-c') AS released;
SELECT leader_election.move_leader('moved') AS moved_nobody;
SELECT leader_election.move_leader('never-used') AS moved_unknown;
-- Nobody holds an expired lease, nor one whose session ended: false, and
-- nothing is recorded or reserved (the next holder records how it ended).
SELECT try_acquire_leader('moved', '100ms', 'host-c') AS acquired_short;
SELECT pg_temp.wait_until_expired('moved');
SELECT leader_election.move_leader('moved', 'host-a') AS moved_expired;
SELECT try_acquire_leader('moved', '1 minute', 'host-b') AS b_takes_expired;
SELECT holder, end_reason FROM leader_election.history WHERE name = 'moved' ORDER BY term;
SELECT try_acquire_leader('ended', '1 minute') AS acquired_session_bound;
SELECT pg_advisory_unlock_all();
SELECT leader_election.move_leader('ended') AS moved_ended_session;
SELECT count(*) AS reservations FROM leader_election.handovers WHERE name = 'ended';
SELECT try_acquire_leader('ended', '1 minute', 'host-b') AS b_takes_ended;
SELECT end_reason FROM leader_election.history WHERE name = 'ended' ORDER BY term;
SELECT pg_temp.try($$SELECT leader_election.move_leader(NULL)$$) AS null_name;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT leader_election.move_leader('moved')$$) AS read_only;
ROLLBACK;
-- A session-bound holder is moved as well.
SELECT try_acquire_leader('sess', '1 minute') AS acquired;
SELECT leader_election.move_leader('sess') AS moved;
SELECT am_leader('sess') AS still_leads;
SELECT try_acquire_leader('sess', '1 minute') AS session_again;

--
-- Roles: another role gets 42501 from set_leader_info and move_leader;
-- the name's owner may move its leader.
--
CREATE ROLE regress_le_owner;
CREATE ROLE regress_le_other;
GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text),
      set_leader_info(text, jsonb, text), release_leader(text, text, text),
      current_leader(text), leader_election.move_leader(text, text)
   TO regress_le_owner, regress_le_other;
GRANT USAGE ON SCHEMA leader_election TO regress_le_owner, regress_le_other;
SET ROLE regress_le_owner;
SELECT try_acquire_leader('owned', '1 minute', 'o1') AS acquired;
SELECT set_leader_info('owned', '{"by": "owner"}', 'o1') AS published;
RESET ROLE;
SET ROLE regress_le_other;
SELECT pg_temp.try($$SELECT set_leader_info('owned', '{"by": "other"}', 'o1')$$) AS other_publishes;
SELECT pg_temp.try($$SELECT leader_election.move_leader('owned')$$) AS other_moves;
SELECT pg_temp.try($$SELECT release_leader('owned', 'o1', 'x')$$) AS other_hands_over;
RESET ROLE;
SELECT holder, info FROM current_leader('owned');
-- Without EXECUTE, nothing at all.
CREATE ROLE regress_le_nobody;
SET ROLE regress_le_nobody;
SELECT pg_temp.try($$SELECT leader_election.move_leader('owned')$$) AS no_grant;
RESET ROLE;
SET ROLE regress_le_owner;
SELECT leader_election.move_leader('owned', 'o2') AS owner_moves;
SELECT try_acquire_leader('owned', '1 minute', 'o2') AS o2_acquired;
RESET ROLE;
DROP OWNED BY regress_le_owner, regress_le_other, regress_le_nobody;
SELECT leader_election.assign_name('owned', current_user::regrole) AS taken_back;
DROP ROLE regress_le_owner, regress_le_other, regress_le_nobody;

--
-- wait_for_leadership's priority: a NULL is refused; a free lease is taken
-- at once whatever the priority (ranking needs other waiters).
--
SELECT pg_temp.try($$SELECT wait_for_leadership('w', '1 minute', '0', 'host-a', NULL)$$) AS null_priority;
SELECT wait_for_leadership('w', '1 minute', '0', 'host-a', -5) AS low_priority_free;
SELECT wait_for_leadership('w', '1 minute', '0', 'host-b', 100) AS high_priority_held;

--
-- NOTIFY payloads of the new events.
--
LISTEN leader_election;
\o | sed -e 's/server process with PID [0-9]*/server process with PID (pid)/' -e 's/session:[0-9]*:[0-9]*@[0-9]*\.[0-9]*/session:(pid):(start)@(server)/g'
\qecho -- info
SELECT try_acquire_leader('ev', '1 minute', 'host-a') AS acquired;
SELECT set_leader_info('ev', '{"url": "http://a"}', 'host-a') AS published;
\qecho -- handed_over, then elected
SELECT release_leader('ev', 'host-a', 'host-b') AS handed_over;
SELECT try_acquire_leader('ev', '1 minute', 'host-b') AS acquired;
\qecho -- moved without and with a successor, then elected with reason moved
SELECT leader_election.move_leader('ev') AS moved;
SELECT try_acquire_leader('ev', '1 minute', 'host-c') AS acquired;
SELECT leader_election.move_leader('ev', 'host-a') AS moved;
SELECT try_acquire_leader('ev', '1 minute', 'host-a') AS acquired;
\qecho -- nothing for a false answer
SELECT set_leader_info('ev', '{}', 'host-b') AS not_holder;
\qecho -- the same info again in a term, in one transaction: every event heard,
\qecho -- the repeated one with a trailing space
BEGIN;
SELECT set_leader_info('ev', '{"v": "A"}', 'host-a') AS a;
SELECT set_leader_info('ev', '{"v": "B"}', 'host-a') AS b;
SELECT set_leader_info('ev', '{"v": "A"}', 'host-a') AS a_again;
COMMIT;
\qecho -- the first holder of a reserved name: elected with reason none
SELECT leader_election.assign_name('reserved-ev', current_user::regrole) AS reserved;
SELECT try_acquire_leader('reserved-ev', '1 minute', 'host-a') AS acquired;
\qecho -- a release by an administrator after a grant, in one transaction: in term order
BEGIN;
SELECT try_acquire_leader('admin-ev', '1 minute', 'host-a') AS acquired;
SELECT leader_election.release_name('admin-ev') AS released_by_admin;
SELECT try_acquire_leader('admin-ev', '1 minute', 'host-b') AS acquired;
COMMIT;
\o
UNLISTEN leader_election;
RESET leader_election.notify_delivery;

--
-- Info and reservations are matched on the term and its start (info) or
-- the instant it ended (reservations): after the term counter was moved
-- back (which voids the terms guarantee, as tests do), a term number
-- issued again does not bring back old info or an old reservation.
--
SELECT try_acquire_leader('reuse', '1 minute', 'h') AS acquired;
SELECT set_leader_info('reuse', '{"old": true}', 'h') AS published;
SELECT release_leader('reuse', 'h', 'succ') AS handed_over;
SELECT term AS reused_term FROM leader_election.leases WHERE name = 'reuse' \gset
TRUNCATE leader_election.leases, leader_election.history;
SELECT setval('leader_election.terms', :reused_term - 1, :reused_term > 1) IS NOT NULL AS moved_back;
SELECT try_acquire_leader('reuse', '1 minute', 'h') AS acquired_again;
SELECT term = :reused_term AS same_term_number, info IS NULL AS no_old_info
  FROM current_leader('reuse');
SELECT release_leader('reuse', 'h') AS released;
SELECT term = :reused_term AS same_term_number FROM leader_election.leases WHERE name = 'reuse';
SELECT try_acquire_leader('reuse', '1 minute', 'other') AS other_not_barred;

--
-- A reservation runs one ttl from the commit that makes it, not from the
-- call: a transaction that commits more than a ttl after its move or
-- hand-over still leaves the whole ttl (found by review rv56).
--
-- Returns, inside the caller's transaction, once the reservation of name
-- as the call wrote it has passed.
CREATE FUNCTION pg_temp.outlive_reservation(n text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    WHILE clock_timestamp() <= (SELECT reserved_until FROM leader_election.handovers
                                 WHERE name = n) LOOP
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT try_acquire_leader('late-move', '2 s', 'host-a') AS acquired;
BEGIN;
SELECT leader_election.move_leader('late-move') AS moved;
SELECT pg_temp.outlive_reservation('late-move');
SELECT clock_timestamp() AS before_commit \gset
COMMIT;
SELECT reserved_until >= :'before_commit'::timestamptz + interval '2 s' AS runs_from_commit
  FROM leader_election.handovers WHERE name = 'late-move';
SELECT try_acquire_leader('late-move', '2 s', 'host-a') AS moved_holder_again;
SELECT try_acquire_leader('late-hand-over', '2 s', 'host-a') AS acquired;
BEGIN;
SELECT release_leader('late-hand-over', 'host-a', 'host-b') AS handed_over;
SELECT pg_temp.outlive_reservation('late-hand-over');
SELECT clock_timestamp() AS before_commit \gset
COMMIT;
SELECT reserved_until >= :'before_commit'::timestamptz + interval '2 s' AS runs_from_commit
  FROM leader_election.handovers WHERE name = 'late-hand-over';
SELECT try_acquire_leader('late-hand-over', '2 s', 'host-c') AS other_holder;
SELECT try_acquire_leader('late-hand-over', '2 s', 'host-b') AS successor;
-- Rolled back with a savepoint, a hand-over leaves nothing to re-stamp; a
-- later reservation of the same name in the transaction is the one kept.
SELECT try_acquire_leader('twice', '1 minute', 'host-a') AS acquired;
BEGIN;
SAVEPOINT s;
SELECT release_leader('twice', 'host-a', 'host-b') AS handed_over;
ROLLBACK TO SAVEPOINT s;
SELECT release_leader('twice', 'host-a', 'host-c') AS handed_over_again;
COMMIT;
SELECT successor, reserved_until > now() + interval '50 s' AS about_a_minute
  FROM leader_election.handovers WHERE name = 'twice';
-- A transaction set read-only after its hand-over still commits it, as it
-- commits a plain release.
SELECT try_acquire_leader('read-only-later', '1 minute', 'host-a') AS acquired;
BEGIN;
SELECT release_leader('read-only-later', 'host-a', 'host-b') AS handed_over;
SET transaction_read_only = on;
COMMIT;
SELECT successor, reserved_until > now() + interval '50 s' AS about_a_minute
  FROM leader_election.handovers WHERE name = 'read-only-later';
SELECT count(*) AS holders FROM current_leader('read-only-later');
-- Unless code an administrator added to the tables would run inside that
-- write: then such a commit fails, and the added code wrote nothing.
CREATE TABLE public.handover_audit (op text);
CREATE FUNCTION public.handover_audit() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO public.handover_audit VALUES (TG_OP);
    RETURN NEW;
END $$;
CREATE TRIGGER handover_audit AFTER UPDATE ON leader_election.handovers
    FOR EACH ROW EXECUTE FUNCTION public.handover_audit();
SELECT try_acquire_leader('read-only-audited', '1 minute', 'host-a') AS acquired;
BEGIN;
SELECT release_leader('read-only-audited', 'host-a', 'host-b') AS handed_over;
SET transaction_read_only = on;
COMMIT;
SELECT count(*) AS audited FROM public.handover_audit;
SELECT holder FROM current_leader('read-only-audited');
DROP TRIGGER handover_audit ON leader_election.handovers;
DROP FUNCTION public.handover_audit();
DROP TABLE public.handover_audit;
