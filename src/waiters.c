/*-------------------------------------------------------------------------
 *
 * waiters.c
 *	  The sessions waiting in wait_for_leadership() for each name, with
 *	  their priorities: who should take a lease when it frees (I10 in
 *	  lease.c).
 *
 * With the library in shared_preload_libraries, shared memory holds one
 * entry per backend that can wait (max_connections + max_worker_processes);
 * a waiter fills one for the whole of its wait with its database, the name,
 * its priority and a ticket from a counter (its place in the queue).  A
 * waiter is outranked if another entry for the same database and name has
 * a higher priority, or the same priority and an earlier ticket (it has
 * waited longer).  An outranked waiter does not take a free lease; the one
 * that outranks it does, and its commit wakes the others (wakeup.c).
 *
 * An entry is freed when its wait ends, however it ends: normally, by an
 * error or cancel (PG_FINALLY in lease.c), or by the backend exiting (an
 * on_shmem_exit callback); a crash reinitialises shared memory.  A waiter
 * that leaves without the lease wakes the name's other waiters at once, so
 * the next in rank does not sleep until its recheck.
 *
 * Entries hold the whole name, not a hash: a collision would make a waiter
 * defer, forever, to a waiter of another name.
 *
 * LOCKING: one spinlock over the array, held only to fill, free or scan it
 * (no allocation, no error, no other lock inside).
 *
 * Without preloading there is no shared memory: nobody registers, nobody is
 * outranked, and waiters race as in 1.0 (documented in the README).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "leader_election.h"

typedef struct LeWaiter
{
	int			pid;			/* 0: free */
	Oid			dbid;
	int32		priority;
	uint64		ticket;			/* lower: waiting longer */
	uint32		name_hash;		/* compared before the name */
	char		name[LE_MAX_NAME_BYTES + 1];
} LeWaiter;

typedef struct LeWaiters
{
	slock_t		mutex;
	uint64		next_ticket;
	int			size;
	LeWaiter	entries[FLEXIBLE_ARRAY_MEMBER];
} LeWaiters;

static LeWaiters *le_waiters = NULL;

/* This backend's entry while it waits, or -1. */
static int	le_my_entry = -1;
static bool le_waiters_exit_registered = false;

static int
le_waiters_count(void)
{
	return MaxConnections + max_worker_processes;
}

Size
le_waiters_shmem_size(void)
{
	return add_size(offsetof(LeWaiters, entries),
					mul_size(le_waiters_count(), sizeof(LeWaiter)));
}

void
le_waiters_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_waiters = ShmemInitStruct("leader_election waiters",
								 le_waiters_shmem_size(), &found);
	if (!found)
	{
		SpinLockInit(&le_waiters->mutex);
		le_waiters->next_ticket = 1;
		le_waiters->size = le_waiters_count();
		for (int i = 0; i < le_waiters->size; i++)
			le_waiters->entries[i].pid = 0;
	}
	LWLockRelease(AddinShmemInitLock);
}

static void
le_waiters_on_exit(int code, Datum arg)
{
	le_waiter_unregister(false);
}

/*
 * Join the name's waiters with this priority.  If every entry is taken (it
 * cannot be while each backend waits at most once at a time), the wait goes
 * on unranked.
 */
void
le_waiter_register(const char *name, int32 priority)
{
	if (le_waiters == NULL)
		return;
	if (le_my_entry >= 0)
		le_waiter_unregister(false);
	if (!le_waiters_exit_registered)
	{
		on_shmem_exit(le_waiters_on_exit, (Datum) 0);
		le_waiters_exit_registered = true;
	}
	SpinLockAcquire(&le_waiters->mutex);
	for (int i = 0; i < le_waiters->size; i++)
	{
		LeWaiter   *w = &le_waiters->entries[i];

		if (w->pid != 0)
			continue;
		w->pid = MyProcPid;
		w->dbid = MyDatabaseId;
		w->priority = priority;
		w->ticket = le_waiters->next_ticket++;
		w->name_hash = hash_bytes((const unsigned char *) name, strlen(name));
		strlcpy(w->name, name, sizeof(w->name));
		le_my_entry = i;
		break;
	}
	SpinLockRelease(&le_waiters->mutex);
}

/*
 * Leave the waiters.  Without the lease, wake the name's other waiters:
 * one of them may now be the first in rank.
 */
void
le_waiter_unregister(bool acquired)
{
	char		name[LE_MAX_NAME_BYTES + 1];
	bool		others = false;

	if (le_waiters == NULL || le_my_entry < 0)
		return;
	SpinLockAcquire(&le_waiters->mutex);
	{
		LeWaiter   *me = &le_waiters->entries[le_my_entry];

		strlcpy(name, me->name, sizeof(name));
		me->pid = 0;
		for (int i = 0; i < le_waiters->size; i++)
		{
			LeWaiter   *w = &le_waiters->entries[i];

			if (w->pid != 0 && w->name_hash == me->name_hash &&
				w->dbid == MyDatabaseId && strcmp(w->name, name) == 0)
			{
				others = true;
				break;
			}
		}
	}
	SpinLockRelease(&le_waiters->mutex);
	le_my_entry = -1;
	if (others && !acquired)
		le_wake_waiters_now(name);
}

/*
 * Is this backend waiting for `name` behind another waiter (I10)?  False
 * for a backend that is not waiting (try_acquire_leader, the task runner).
 *
 * A waiter is counted in its wakeup slot (wakeup.c) only after it has
 * registered here, so while the slot counts this backend alone no other
 * waiter of the name can be registered (except one arriving right now, no
 * different from one arriving a moment later): the usual case of a single
 * waiter takes no lock.
 */
bool
le_waiter_outranked(const char *name)
{
	bool		outranked = false;

	if (le_waiters == NULL || le_my_entry < 0)
		return false;
	if (le_waiting_candidates(name) <= 1)
		return false;
	SpinLockAcquire(&le_waiters->mutex);
	{
		LeWaiter   *me = &le_waiters->entries[le_my_entry];

		if (strcmp(me->name, name) == 0)
		{
			for (int i = 0; i < le_waiters->size; i++)
			{
				LeWaiter   *w = &le_waiters->entries[i];

				if (i == le_my_entry || w->pid == 0 ||
					w->name_hash != me->name_hash ||
					w->dbid != me->dbid || strcmp(w->name, name) != 0)
					continue;
				if (w->priority > me->priority ||
					(w->priority == me->priority && w->ticket < me->ticket))
				{
					outranked = true;
					break;
				}
			}
		}
	}
	SpinLockRelease(&le_waiters->mutex);
	return outranked;
}
