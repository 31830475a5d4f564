/*-------------------------------------------------------------------------
 *
 * leader_election.h
 *	  Declarations shared by the files of the leader_election extension.
 *
 * Who owns what:
 *	  leader_election.c  module load: settings, shared memory, callbacks
 *	  input.c            validation of names, holders and ttls
 *	  identity.c         who the caller is; whether a session holder lives
 *	  lease_store.c      every read and write of the extension's tables
 *	  terms.c            where terms come from: one counter per database, eras
 *	  lease_cache.c      the latest committed leases in shared memory
 *	  lease.c            the protocol and the SQL-callable functions
 *	  commit_rules.c     what a transaction that changed a lease must meet at commit
 *	  catalog_watch.c    DDL that could change leases behind the cache's back
 *	  name_admin.c       the administrator's functions for names (C half)
 *	  role_guard.c       DROP ROLE refuses roles that own names or tasks
 *	  wakeup.c           waking waiters; per-transaction bookkeeping
 *	  waiters.c          the waiting candidates of each name, with their priorities
 *	  leader_info.c      what a leader publishes about itself (set_leader_info)
 *	  handover.c         reservations made by a hand-over or a move
 *	  notify_queue.c     NOTIFY of changes of leader, sent by a notifier worker
 *	  listeners.c        whether any session listens for those notifications
 *	  task_registry.c    the task runner: registering tasks and their checks
 *	  task_launcher.c    the task runner: launcher, settings, shared memory
 *	  task_worker.c      the task runner: one task's worker
 *	  stats.c            counters per database: the view leader_election.stats
 *
 * The task runner's own declarations and design are in task_runner.h.
 *
 * The protocol's invariants are written down once, at the top of lease.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEADER_ELECTION_H
#define LEADER_ELECTION_H

#include "postgres.h"

#include "access/tableam.h"
#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/lock.h"
#include "utils/relcache.h"
#include "utils/reltrigger.h"

/* Limits, documented in the README. */
#define LE_MAX_NAME_BYTES		255
#define LE_MAX_HOLDER_BYTES		255
#define LE_MIN_TTL_USECS		(100 * INT64CONST(1000))	/* 100 ms */
#define LE_MAX_TTL_USECS		(7 * USECS_PER_DAY) /* 7 days */

/* Bytes of the secret that keys writer locks (leader_election.lock_key). */
#define LE_LOCK_KEY_BYTES		32

/* Prefix of session identities; explicit holders may not use it. */
#define LE_SESSION_PREFIX		"session:"

/* SQLSTATE of a failed assert_leader: class LE, "leader election". */
#define ERRCODE_LE_NOT_LEADER	MAKE_SQLSTATE('L','E','0','0','1')

/*
 * Advisory lock key spaces of our own.  pg_advisory_lock() uses field4
 * values 1 and 2, so keys with these field4 values can never block, or be
 * blocked by, an application's advisory locks.  They show in pg_locks as
 * locktype 'advisory' with objsubid 19525 to 19529.
 */
#define LE_LOCKTAG_WRITER		0x4C45	/* one writer per name at a time */
#define LE_LOCKTAG_SESSION		0x4C46	/* "this session is alive" */
#define LE_LOCKTAG_ROLE_NAMES	0x4C47	/* a role's first uses of names, one at a time */
#define LE_LOCKTAG_TERMS		0x4C48	/* one mover of the term counter at a time */
#define LE_LOCKTAG_NOTIFY		0x4C49	/* one sender of queued notifications per database */

/* NOTIFY channel for changes of leader. */
#define LE_NOTIFY_CHANNEL		"leader_election"

/*
 * The lease row as this backend saw it.  Strings are palloc'd in the
 * caller's memory context.
 */
typedef struct LeaseRow
{
	bool		found;			/* is there a row for the name at all? */
	Oid			owner;			/* role the name belongs to */
	char	   *holder;			/* NULL when released or never held */
	int64		term;
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	int32		session_pid;	/* 0 unless the lease is session-bound */
	TimestampTz session_start;
	int32		holder_pid;
	Oid			holder_role;
	char	   *application_name;	/* may be NULL */
	bool		client_addr_null;
	Datum		client_addr;	/* inet, valid unless client_addr_null */
} LeaseRow;

/* Outcome of le_store_lock_row(). */
typedef enum LeRowLock
{
	LE_ROW_LOCKED,				/* locked; *locked is its latest version */
	LE_ROW_BUSY,				/* locked by another transaction */
	LE_ROW_ABSENT				/* no row for the name */
} LeRowLock;

/* Who is asking. */
typedef struct LeIdentity
{
	char	   *holder;			/* the holder string stored in the row */
	bool		session_bound;	/* holder is this backend's own session */
} LeIdentity;

/* Why a term ended, as recorded in leader_election.history. */
typedef enum LeEndReason
{
	LE_END_RELEASED,
	LE_END_EXPIRED,
	LE_END_SESSION_ENDED,
	LE_END_MOVED
} LeEndReason;

/*
 * The reservation a hand-over (release_leader with a successor) or a move
 * (move_leader) leaves on the ended term; rules in handover.c.
 */
typedef struct LeHandover
{
	int64		term;			/* the ended term it belongs to */
	char	   *previous_holder;	/* who held that term */
	char	   *successor;		/* only this holder may take it, or NULL */
	bool		moved;			/* a move (else a hand-over) */
	TimestampTz ended_at;		/* the expiry the end gave the lease */
	TimestampTz reserved_until;
} LeHandover;

/* Most bytes of the text form of a leader's info (leader_info.c). */
#define LE_MAX_INFO_BYTES		4096

/* leader_election.notify_delivery */
typedef enum LeNotifyDelivery
{
	LE_NOTIFY_BACKGROUND,
	LE_NOTIFY_IN_TRANSACTION
} LeNotifyDelivery;

/* settings (leader_election.c) */
extern char *le_holder_id_setting;
extern int	le_history_max_terms;
extern int	le_max_names_per_role;
extern bool le_check_holder_setting(const char *value, const char *setting);

/* input.c */
extern char *le_checked_name(FunctionCallInfo fcinfo, int argno);
extern char *le_checked_optional_holder(FunctionCallInfo fcinfo, int argno);
extern const char *le_label_problem(const char *s, int max_bytes);
extern const char *le_utf8_conversion_problem(const char *s, size_t len);
extern void le_check_holder_text(const char *holder, const char *what);
extern int64 le_checked_interval(FunctionCallInfo fcinfo, int argno,
								 const char *what, int64 min_usecs,
								 int64 max_usecs, const char *bounds);

/* identity.c */
extern LeIdentity le_resolve_identity(const char *explicit_holder);
extern bool le_session_identity_well_formed(const char *identity);
extern void le_hold_session_liveness_lock(void);
extern bool le_session_alive(const char *holder, int32 pid, TimestampTz started);
extern bool le_is_own_session(int32 pid, TimestampTz started);
extern TimestampTz le_session_start_value(void);

/* owner_rights.c */
typedef struct LeOwnerRights
{
	Oid			save_userid;
	int			save_sec_context;
	int			guc_nest_level; /* -1 unless search_path was set (O2) */
} LeOwnerRights;
extern bool le_rel_runs_added_code(Relation rel,
								   bool (*is_own_trigger) (const Trigger *trigger));
extern void le_owner_rights_begin(LeOwnerRights *rights, Oid owner,
								  bool added_code);
extern void le_owner_rights_begin_statements(LeOwnerRights *rights, Oid owner,
											 bool (*lock_and_decide) (void));
extern void le_owner_rights_refuse_temp(bool (*lock_and_decide) (void));
extern void le_owner_rights_end(LeOwnerRights *rights);

/* direct_write.c */
extern bool le_direct_insert_allowed(Relation rel, Oid only_index,
									 bool only_our_triggers);
extern void le_direct_insert(Relation rel, Relation idx, Datum *values,
							 bool *nulls);
extern void le_direct_prepare(Relation rel);
extern Size le_insert_hints_shmem_size(void);
extern void le_insert_hints_shmem_init(void);
extern TM_Result le_direct_update(Relation rel, Relation idx,
								  ItemPointer otid, HeapTuple newtup);

/* lease_store.c */
extern void le_store_refuse_temp_objects(void);
extern bool le_store_is_own_trigger(const Trigger *t);
extern void le_store_read(const char *name, LeaseRow *row);
extern void le_store_read_for_answer(const char *name, LeaseRow *row);
extern void le_store_read_row_for_answer(const char *name, LeaseRow *row);
extern LeRowLock le_store_lock_row(const char *name, bool for_takeover,
								   LeaseRow *locked);
extern void le_store_prepare_takeover(const char *name);
extern void le_store_reserve(const char *name);
extern void le_store_insert(const char *name, const LeIdentity *who,
							int64 term, TimestampTz now, TimestampTz expires);
extern bool le_store_renew(const char *name, const LeaseRow *row,
						   TimestampTz now, TimestampTz expires);
extern void le_store_take_over(const char *name, const LeIdentity *who,
							   Oid owner, int64 old_term, int64 new_term,
							   TimestampTz now, TimestampTz expires);
extern void le_store_take_over_with_history(const char *name,
											const LeIdentity *who, Oid owner,
											int64 old_term, int64 new_term,
											TimestampTz now, TimestampTz expires,
											bool end_old, TimestampTz ended_at,
											LeEndReason reason);
extern void le_store_release(const char *name, const LeaseRow *row,
							 TimestampTz now);
extern int64 le_store_count_names(Oid owner);
extern bool le_store_schema_1_0(void);
extern Oid	le_store_terms_relid(void);
extern int64 le_store_terms_next(void);
extern void le_store_advance_terms(int64 at_least);
extern bool le_store_term_era_read(uint64 sysid, TimeLineID tli, int64 *first_term,
								   bool *foreign, TimeLineID *rec_tli);
extern void le_store_record_term_era(uint64 sysid, TimeLineID tli, int64 first_term);
extern int64 le_store_history_max_term(const char *name);
extern void le_store_lock_key(uint8 *key);
extern Oid	le_store_leases_relid(void);
extern bool le_extension_installed(void);
extern void le_store_lock_for_admin_change(void);
extern void le_history_begin(const char *name, int64 term,
							 const LeIdentity *who, Oid owner,
							 TimestampTz at);
extern void le_history_end(const char *name, int64 term, TimestampTz at,
						   LeEndReason reason);
extern void le_store_set_info(const char *name, int64 term,
							  TimestampTz acquired_at, Datum info, bool clear,
							  TimestampTz now);
extern char *le_store_read_info(const char *name, int64 term,
								TimestampTz acquired_at);
extern void le_store_set_handover(const char *name, const LeHandover *h);
extern void le_store_restamp_handover(const char *name, int64 term,
									  TimestampTz ended_at, TimestampTz reserved_until);
extern bool le_store_read_handover(const char *name, int64 term,
								   TimestampTz ended_at, LeHandover *h);

/* terms.c */
extern int64 le_next_term(const char *name, int64 old_term);
extern void le_terms_prepare(void);

/* lease_cache.c */
extern Datum le_leases_cache_invalidate(PG_FUNCTION_ARGS);
extern Size le_cache_shmem_size(void);
extern void le_cache_shmem_init(void);
extern void le_cache_register_callbacks(void);
extern bool le_cache_available(void);
extern bool le_cache_lookup(Oid relid, const char *name, LeaseRow *row);
extern void le_cache_fill(Oid relid, const char *name, const LeaseRow *row);
extern void le_cache_note_write(Oid relid, const char *name,
								const LeaseRow *row);
extern void le_cache_own_write_begin(void);
extern void le_cache_own_write_end(void);
extern void le_cache_forget_all(void);
extern void le_cache_note_foreign_change(void);

/* lease.c */
extern bool le_lease_valid(const LeaseRow *row, TimestampTz now);
extern bool le_try_acquire(const char *name, int64 ttl_usecs,
						   const LeIdentity *who, TimestampTz *retry_at);
extern void le_lock_name_writer(const char *name);
extern bool le_holds_name_writer(const char *name);
extern void le_claim_name(const char *name);
extern bool le_try_acquire_in_statement(const char *name, int64 ttl_usecs,
										const LeIdentity *who);
extern bool le_renew_without_waiting(const char *name, int64 ttl_usecs,
									 const LeIdentity *who);
extern bool le_release_term(const char *name, const LeIdentity *who,
							int64 term);
extern void le_check_owner(const char *name, const LeaseRow *row);
extern void le_unlock_name_writer(const char *name);
extern bool le_holds_valid_lease(const LeaseRow *row, const LeIdentity *who,
								 TimestampTz now);

/* leader_info.c */
extern char *le_leader_info(const char *name, const LeaseRow *row);

/* handover.c */
extern void le_handover_reserve(const char *name, const LeaseRow *ended,
								const char *successor, bool moved,
								TimestampTz now);
typedef enum LeReservation
{
	LE_RESERVATION_NONE,		/* none in force: anyone may take the lease */
	LE_RESERVATION_FOR_ME,		/* in force, and the caller is the successor */
	LE_RESERVATION_BARS_ME		/* in force, and the caller may not take it */
} LeReservation;
extern const char *le_handover_barred_holder(const LeHandover *h, TimestampTz now);
extern LeReservation le_handover_check(const char *name, const LeaseRow *row,
									   const LeIdentity *who, TimestampTz now,
									   LeHandover *h);
extern char *le_checked_optional_successor(FunctionCallInfo fcinfo, int argno);

/* waiters.c */
extern Size le_waiters_shmem_size(void);
extern void le_waiters_shmem_init(void);
extern void le_waiter_register(const char *name, const char *holder, int32 priority);
extern void le_waiter_unregister(bool acquired);
extern bool le_waiter_outranked(const char *name, const char *barred);
extern int32 le_waiters_for_name(const char *name);

/* commit_rules.c */
extern void le_commit_note_write(const char *name, TimestampTz expires_at);
extern void le_commit_note_reservation(const char *name, int64 term,
									   TimestampTz ended_at, int64 ttl);
extern void le_commit_register_callbacks(void);
extern void le_terms_register_callbacks(void);

/* catalog_watch.c */
extern void le_catalog_watch_install(void);

/* wakeup.c */
extern Size le_wakeup_shmem_size(void);
extern void le_wakeup_shmem_init(void);
extern void le_wakeup_register_callbacks(void);
extern void le_xact_touched(const char *name);
extern bool le_xact_touched_any(void);
extern void le_wake_on_session_exit(const char *name);
extern void le_wait_begin(const char *name);
extern void le_wait_attempt(void);
extern void le_wait_sleep(TimestampTz until);
extern void le_wait_end(void);
extern int32 le_waiting_candidates(const char *name);
extern void le_wake_waiters_now(const char *name);
extern void le_xact_took_writer(const char *name);
extern void le_writer_try_begin(const char *name);
extern void le_writer_try_end(void);
extern void le_writer_given_back(const char *name);

/*
 * stats.c: what is counted.  Outcomes (up to LE_STAT_MOVES) count at commit,
 * events when they happen; the order is the view's column order.
 * LE_STAT_MOVES is for move_leader: le_stats_count(LE_STAT_MOVES) where the
 * move is written.
 */
typedef enum LeStat
{
	LE_STAT_GRANTS,
	LE_STAT_RENEWALS,
	LE_STAT_RELEASES,
	LE_STAT_TAKEOVERS_EXPIRED,
	LE_STAT_TAKEOVERS_SESSION_ENDED,
	LE_STAT_MOVES,
	LE_STAT_LOSING_TRIES,
	LE_STAT_FENCE_REJECTIONS,
	LE_STAT_WAITS,
	LE_STAT_WAKEUPS,
	LE_STAT_COUNT
} LeStat;

/* stats.c */
extern Size le_stats_shmem_size(void);
extern void le_stats_shmem_init(void);
extern void le_stats_register_callbacks(void);
extern void le_stats_count(LeStat kind);
extern void le_stats_forget_database(Oid dbid);

/* notify_queue.c */
extern int	le_notify_delivery;
extern Size le_notify_shmem_size(void);
extern void le_notify_shmem_init(void);
extern void le_notify_register_callbacks(void);
extern void le_notify(const char *name, const char *event, const char *holder,
					  int64 term, const char *reason, const char *info,
					  const char *successor);
extern void le_notify_listener_ready(void);

/* listeners.c */
extern Size le_listeners_shmem_size(void);
extern void le_listeners_shmem_init(void);
extern void le_listeners_install(void);
extern bool le_listeners_any(void);

/* role_guard.c */
extern void le_lock_new_owner(Oid role, bool is_caller);
extern void le_role_guard_install(void);

/* keyed_hash.c */
extern uint64 le_keyed_hash64(const uint8 *key, const uint8 *data, size_t len);
extern bool le_keyed_hash_self_test(void);

#endif							/* LEADER_ELECTION_H */
