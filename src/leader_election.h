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
 *	  notify_queue.c     NOTIFY of changes of leader, sent by a notifier worker
 *	  task_registry.c    the task runner: registering tasks and their checks
 *	  task_launcher.c    the task runner: launcher, settings, shared memory
 *	  task_worker.c      the task runner: one task's worker
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

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/lock.h"

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
	LE_ROW_LOCKED,				/* locked; re-read it with le_store_read() */
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
	LE_END_SESSION_ENDED
} LeEndReason;

/* What a NOTIFY payload says (notify_queue.c). */
typedef enum LeNotifyEventKind
{
	LE_EVENT_ELECTED,
	LE_EVENT_RELEASED
} LeNotifyEventKind;

typedef enum LeNotifyReason
{
	LE_REASON_NONE,				/* a new name */
	LE_REASON_RELEASED,
	LE_REASON_EXPIRED,
	LE_REASON_SESSION_ENDED
} LeNotifyReason;

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
extern void le_check_holder_text(const char *holder, const char *what);
extern int64 le_checked_interval(FunctionCallInfo fcinfo, int argno,
								 const char *what, int64 min_usecs,
								 int64 max_usecs, const char *bounds);

/* identity.c */
extern LeIdentity le_resolve_identity(const char *explicit_holder);
extern void le_hold_session_liveness_lock(void);
extern bool le_session_alive(const char *holder, int32 pid, TimestampTz started);
extern bool le_is_own_session(int32 pid, TimestampTz started);
extern TimestampTz le_session_start_value(void);

/* lease_store.c */
extern void le_store_read(const char *name, LeaseRow *row);
extern void le_store_read_for_answer(const char *name, LeaseRow *row);
extern void le_store_read_row_for_answer(const char *name, LeaseRow *row);
extern LeRowLock le_store_lock_row(const char *name, bool for_takeover);
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
extern int64 le_store_terms_next(void);
extern void le_store_advance_terms(int64 at_least);
extern bool le_store_term_era_read(uint64 sysid, TimeLineID tli, int64 *first_term);
extern bool le_store_record_term_era(uint64 sysid, TimeLineID tli, int64 first_term);
extern int64 le_store_history_max_term(const char *name);
extern void le_store_lock_key(uint8 *key);
extern Oid	le_store_leases_relid(void);
extern void le_history_begin(const char *name, int64 term,
							 const LeIdentity *who, Oid owner,
							 TimestampTz at);
extern void le_history_end(const char *name, int64 term, TimestampTz at,
						   LeEndReason reason);

/* terms.c */
extern int64 le_next_term(const char *name, int64 old_term);

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
extern bool le_try_acquire_in_statement(const char *name, int64 ttl_usecs,
										const LeIdentity *who);
extern bool le_release_term(const char *name, const LeIdentity *who,
							int64 term);

/* commit_rules.c */
extern void le_commit_note_write(const char *name, TimestampTz expires_at);
extern void le_commit_register_callbacks(void);

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

/* notify_queue.c */
extern int	le_notify_delivery;
extern Size le_notify_shmem_size(void);
extern void le_notify_shmem_init(void);
extern void le_notify_register_callbacks(void);
extern void le_notify_change(const char *name, LeNotifyEventKind event,
							 const char *holder, int64 term,
							 LeNotifyReason reason);
extern void le_notify_flush_into_transaction(void);

/* role_guard.c */
extern void le_role_guard_install(void);

#endif							/* LEADER_ELECTION_H */
