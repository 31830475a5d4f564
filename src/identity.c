/*-------------------------------------------------------------------------
 *
 * identity.c
 *	  Who the caller is, and whether a session that holds a lease lives.
 *
 * A caller's holder identity is, in order: the holder argument, the
 * leader_election.holder_id setting, or this backend's session identity
 * "session:<pid>:<backend start in microseconds>@<system identifier>.<timeline>".
 * The start time makes the identity unique for the life of the server even
 * when pids are reused; the server part says which server can see it end.
 *
 * Liveness of a session-bound lease's holder is decided by the lock manager,
 * not by a clock: the first time a backend takes a lease under its session
 * identity it takes, for the rest of its life, a session-level advisory lock
 * in our own key space keyed by (pid, start time).  The lock disappears the
 * instant the backend exits, however it exits.  Another backend asks "is that
 * session alive?" by trying a conflicting lock without waiting.
 *
 * Only the server (and timeline) a session lives on can see it end.  On a
 * hot standby the primary's backends are invisible, so there a session
 * holder counts as alive and the ttl alone decides.  So it does on a
 * promoted standby, or any other server, for a lease whose identity names
 * another server or timeline: the old primary may still be up (a
 * partition, a manager's mistake) with its holder renewing there, and the
 * lease must keep its replicated expires_at.  Instant takeover is for
 * sessions of this server on this timeline, whose end the lock manager
 * sees (a crash restart keeps the timeline: its sessions are gone, and
 * free at once).  Identities without the server part (1.0's) count as
 * this server's.
 *
 * Once void, always void.  pg_advisory_unlock_all() and DISCARD ALL release
 * every session-level advisory lock, this one included, and so end the
 * session's session-bound leases (documented).  The session must not bring
 * them back by taking the lock again, so it never does: when it finds its
 * liveness lock gone, it moves to a new *incarnation*, whose identity and
 * lock use a start value one microsecond later ("session:<pid>:<start + n>"
 * after the n-th loss).  Leases of the old incarnation stay void for good;
 * continuing needs a new acquisition, which gets a new term.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/memutils.h"

#include "compat.h"
#include "leader_election.h"

static char *le_session_identity = NULL;

/*
 * The start value of this session's current incarnation: MyStartTimestamp
 * plus the number of times the liveness lock was lost.  A pid is reused only
 * by a backend that starts later, so no other session can have the same
 * (pid, start value) while this one lives.
 */
static TimestampTz le_incarnation_start = 0;

/* Did this incarnation take its liveness lock? */
static bool le_liveness_taken = false;

/*
 * The liveness lock of backend (pid, started): (database, pid, low 32 bits
 * of the start value).  A lease and its holder's session always share a
 * database, so pg_locks shows it like any advisory lock of this database.
 * A reused pid matches only if the new backend started a whole multiple of
 * 2^32 microseconds (71.6 minutes) after the old one to the microsecond; even
 * then the worst case is a dead holder's lease waiting for its ttl.
 */
static void
le_session_locktag(LOCKTAG *tag, int32 pid, TimestampTz started)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) pid,
						 (uint32) ((uint64) started), LE_LOCKTAG_SESSION);
}

/*
 * If this incarnation's liveness lock was taken and is gone (released by
 * pg_advisory_unlock_all or DISCARD ALL), start a new incarnation.
 */
static void
le_check_incarnation(void)
{
	LOCKTAG		tag;

	if (le_incarnation_start == 0)
		le_incarnation_start = MyStartTimestamp;
	if (!le_liveness_taken)
		return;
	le_session_locktag(&tag, MyProcPid, le_incarnation_start);
	if (le_lock_held_by_me(&tag, ExclusiveLock))
		return;
	le_incarnation_start++;
	le_liveness_taken = false;
	if (le_session_identity != NULL)
	{
		pfree(le_session_identity);
		le_session_identity = NULL;
	}
}

/* The timeline le_session_identity was made on. */
static TimeLineID le_session_identity_tli = 0;

static const char *
le_own_session_identity(void)
{
	TimeLineID	tli = le_server_timeline();

	le_check_incarnation();
	if (le_session_identity != NULL && le_session_identity_tli != tli)
	{
		/* Promoted since: this session now lives on the new timeline. */
		pfree(le_session_identity);
		le_session_identity = NULL;
	}
	if (le_session_identity == NULL)
	{
		le_session_identity = MemoryContextStrdup(TopMemoryContext,
												  psprintf("%s%d:" INT64_FORMAT "@" UINT64_FORMAT ".%u",
														   LE_SESSION_PREFIX,
														   MyProcPid,
														   (int64) le_incarnation_start,
														   GetSystemIdentifier(),
														   tli));
		le_session_identity_tli = tli;
	}
	return le_session_identity;
}

/*
 * Could this server see the session in a session identity end?  Not if the
 * identity names another server or timeline.
 */
static bool
le_session_is_local(const char *holder)
{
	const char *at = holder != NULL ? strrchr(holder, '@') : NULL;
	uint64		sysid;
	unsigned int tli;
	char		end;

	if (at == NULL)
		return true;			/* 1.0's identities: no server part */
	if (sscanf(at + 1, UINT64_FORMAT ".%u%c", &sysid, &tli, &end) != 2)
		return false;
	return sysid == GetSystemIdentifier() && (TimeLineID) tli == le_server_timeline();
}

/*
 * Could identity be the identity of a session of a server running this
 * library: "session:<pid>:<start>@<system identifier>.<timeline>", exactly
 * as le_own_session_identity() prints it (no sign, no leading zero, every
 * field positive and in its type's range)?  1.0's form, without the server
 * part, is not: no session makes it any more.  Only the shape is checked:
 * such a session may never have existed, or have ended.
 */
bool
le_session_identity_well_formed(const char *identity)
{
	const char *p = identity;
	char	   *end;
	long long	pid;
	long long	start;
	unsigned long long sysid;
	unsigned long long tli;

	if (strncmp(p, LE_SESSION_PREFIX, strlen(LE_SESSION_PREFIX)) != 0)
		return false;
	p += strlen(LE_SESSION_PREFIX);
	errno = 0;
	pid = strtoll(p, &end, 10);
	if (end == p || *end != ':')
		return false;
	p = end + 1;
	start = strtoll(p, &end, 10);
	if (end == p || *end != '@')
		return false;
	p = end + 1;
	sysid = strtoull(p, &end, 10);
	if (end == p || *end != '.')
		return false;
	p = end + 1;
	tli = strtoull(p, &end, 10);
	if (end == p || *end != '\0' || errno != 0)
		return false;
	/* A backend starts after 2000, and no cluster has system identifier 0. */
	if (pid <= 0 || pid > PG_INT32_MAX || start <= 0 || sysid == 0 ||
		tli == 0 || tli > PG_UINT32_MAX)
		return false;
	/* Printed back the same way: no sign, space or leading zero crept in. */
	return strcmp(identity,
				  psprintf("%s%d:" INT64_FORMAT "@" UINT64_FORMAT ".%u",
						   LE_SESSION_PREFIX, (int) pid, (int64) start,
						   (uint64) sysid, (unsigned int) tli)) == 0;
}

/* Resolve the caller's identity; explicit_holder is already validated. */
LeIdentity
le_resolve_identity(const char *explicit_holder)
{
	LeIdentity	who;

	if (explicit_holder != NULL)
	{
		who.holder = pstrdup(explicit_holder);
		who.session_bound = false;
	}
	else if (le_holder_id_setting != NULL && le_holder_id_setting[0] != '\0')
	{
		le_check_holder_text(le_holder_id_setting, "leader_election.holder_id");
		who.holder = pstrdup(le_holder_id_setting);
		who.session_bound = false;
	}
	else
	{
		who.holder = pstrdup(le_own_session_identity());
		who.session_bound = true;
	}
	return who;
}

/* Is (pid, started) this session's current incarnation? */
bool
le_is_own_session(int32 pid, TimestampTz started)
{
	le_check_incarnation();
	return pid == MyProcPid && started == le_incarnation_start;
}

/* The start value session-bound rows of this session record. */
TimestampTz
le_session_start_value(void)
{
	le_check_incarnation();
	return le_incarnation_start;
}

/*
 * Take this session's liveness lock if it is not held yet.  Probes hold a
 * conflicting lock only for an instant, so waiting here is short.  Called
 * after a grant under the session identity resolved in the same call, so
 * the incarnation cannot have changed in between.
 */
void
le_hold_session_liveness_lock(void)
{
	LOCKTAG		tag;

	le_check_incarnation();
	le_session_locktag(&tag, MyProcPid, le_incarnation_start);
	if (!le_lock_held_by_me(&tag, ExclusiveLock))
		(void) LockAcquire(&tag, ExclusiveLock, true, false);
	le_liveness_taken = true;
}

/*
 * Is the session (pid, started), whose identity is holder, still running?
 * True, meaning "the ttl decides", when this server cannot see it end.
 */
bool
le_session_alive(const char *holder, int32 pid, TimestampTz started)
{
	LOCKTAG		tag;

	/*
	 * A hot standby cannot see the primary's backends: there the ttl alone
	 * decides, and answers are as stale as replication (documented).  Nor
	 * can any server see another's.
	 */
	if (RecoveryInProgress() || !le_session_is_local(holder))
		return true;

	le_session_locktag(&tag, pid, started);
	if (le_is_own_session(pid, started))
		return le_lock_held_by_me(&tag, ExclusiveLock);

	if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, ShareLock, false);
	return false;
}
