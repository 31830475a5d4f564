/*-------------------------------------------------------------------------
 *
 * lease_store.c
 *	  Every read and write of leader_election.leases and .history.
 *
 * Also the storage of the term counter (whose rules are in terms.c), the
 * writer locks' secret key, the leaders' published info (leader_info.c)
 * and the reservations of hand-overs and moves (handover.c).
 *
 * Reads go straight through the primary key index and take no row lock
 * and write nothing.  le_store_read() sees the state committed at this
 * instant, whatever the isolation level: every decision to write is made on
 * it.  Answers that write nothing ask the lease cache first
 * (le_store_read_for_answer, which says when), and every write tells the
 * cache what it wrote (le_cache_note_write).
 *
 * Writes go through SPI plans prepared once per backend and kept, except the
 * renewal under READ COMMITTED, the hottest write of all, which updates the
 * row in place with heap_update (le_store_renew_in_place).  Writes run
 * with the table owner's privileges (ordinary roles have no rights on the
 * tables), under owner_rights.c's rules for code an administrator added to
 * the tables, and under the caller's transaction, so they take effect at commit
 * and vanish on rollback.  Under REPEATABLE READ or SERIALIZABLE a write
 * whose row changed after the transaction's snapshot fails with 40001, as
 * any UPDATE would.
 *
 * This file decides nothing: lease.c decides, under the writer lock, what
 * to write.  This file must never be called to write without that lock.
 *
 * The extension's tables are opened only through le_store_open: a call
 * that waited for DDL on them meets it there, where a dropped table is
 * reported with 55000 and a changed one is looked up again.  (A call that
 * meets a DROP first inside one of its SPI statements gets the parser's
 * 42P01.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inet.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/reltrigger.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "compat.h"
#include "leader_election.h"

/* Columns of leader_election.leases, in table order (checked on load). */
enum
{
	COL_NAME = 0,
	COL_OWNER,
	COL_HOLDER,
	COL_TERM,
	COL_ACQUIRED_AT,
	COL_RENEWED_AT,
	COL_EXPIRES_AT,
	COL_SESSION_PID,
	COL_SESSION_START,
	COL_HOLDER_PID,
	COL_HOLDER_ROLE,
	COL_APPLICATION_NAME,
	COL_CLIENT_ADDR,
	LEASE_NCOLS
};

static const char *const le_lease_columns[LEASE_NCOLS] = {
	"name", "owner", "holder", "term", "acquired_at", "renewed_at",
	"expires_at", "session_pid", "session_start", "holder_pid",
	"holder_role", "application_name", "client_addr"
};

static const Oid le_lease_types[LEASE_NCOLS] = {
	TEXTOID, REGROLEOID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, INT4OID, REGROLEOID, TEXTOID,
	INETOID
};

/* Columns of leader_election.history, in table order. */
enum
{
	HCOL_NAME = 0,
	HCOL_TERM,
	HCOL_HOLDER,
	HCOL_OWNER,
	HCOL_SESSION_BOUND,
	HCOL_HOLDER_PID,
	HCOL_ACQUIRED_AT,
	HCOL_ENDED_AT,
	HCOL_END_REASON,
	HISTORY_NCOLS
};

static const char *const le_history_columns[HISTORY_NCOLS] = {
	"name", "term", "holder", "owner", "session_bound", "holder_pid",
	"acquired_at", "ended_at", "end_reason"
};

static const Oid le_history_types[HISTORY_NCOLS] = {
	TEXTOID, INT8OID, TEXTOID, REGROLEOID, BOOLOID, INT4OID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, TEXTOID
};

#define LE_SELECT_COLUMNS \
	"name, owner, holder, term, acquired_at, renewed_at, expires_at, " \
	"session_pid, session_start, holder_pid, holder_role, " \
	"application_name, client_addr"

/*
 * The relation OIDs, kept per backend.  A relcache invalidation of any of
 * them (or of everything) clears them; the next call looks them up again,
 * so DROP and CREATE EXTENSION in another session are seen.
 */
typedef struct LeStoreRels
{
	bool		valid;
	Oid			leases;
	Oid			leases_pkey;
	Oid			terms_seq;		/* leader_election.terms (I2) */
	Oid			table_owner;
	bool		added_code;		/* a table written carries added code (O2) */
	bool		cache_triggers_ok;	/* the lease cache's triggers are in place */
	bool		fast_path_ok;	/* the table has its installed shape */
	bool		history_direct_ok;	/* history rows may skip the executor */
	Oid			lock_key_rel;	/* leader_election.lock_key */
	Oid			history;		/* leader_election.history */
	Oid			history_pkey;	/* its (name, term) index, if it has that shape */
	bool		schema_1_0;		/* the 1.1 objects are not there yet */
	bool		has_issue_15;	/* leader_info and handovers exist */
	Oid			leader_info;	/* leader_election.leader_info (1.1) */
	Oid			handovers;		/* leader_election.handovers (1.1) */
	Oid			term_era;		/* leader_election.term_era (1.1) */
	bool		lock_key_loaded;
	uint8		lock_key[LE_LOCK_KEY_BYTES];
} LeStoreRels;

static LeStoreRels le_rels;
static bool le_rels_callback_registered = false;
static uint64 le_rels_changes = 0;	/* invalidations that hit le_rels */
static bool le_rels_loading = false;	/* inside le_store_load_rels */

static void le_store_load_rels(void);

/* One of the extension's tables went while a call waited for its lock. */
static void
le_store_dropped(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("a table of extension \"leader_election\" was dropped by a concurrent transaction"),
			 errhint("Retry the call; if the extension itself was dropped, run CREATE EXTENSION leader_election; first.")));
}

/*
 * Open one of the extension's tables, whose OID le_store_load_rels looked
 * up earlier.  Taking the lock processes the invalidations of DDL that
 * committed while the call waited for it (le_store_invalidate then marks
 * le_rels stale); only then is more done, so calls pay nothing for this
 * while nothing changed:
 *
 *   - the table is gone (a DROP EXTENSION, or a DROP of the table): said
 *     with a SQLSTATE (le_store_dropped), not with PostgreSQL's internal
 *     "could not open relation" (XX000);
 *   - it is still there: le_rels is looked up again, so the indexes the
 *     caller opens next (under this table's lock, which no DROP of them
 *     can pass) and the shape it decides on are the table's as of now,
 *     not those of a primary key an ALTER TABLE just replaced.
 */
static Relation
le_store_open(Oid relid, LOCKMODE lockmode)
{
	LockRelationOid(relid, lockmode);
	if (!le_rels.valid)
	{
		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		{
			UnlockRelationOid(relid, lockmode);
			le_store_dropped();
		}
		if (!le_rels_loading)
			le_store_load_rels();
	}
	return table_open(relid, NoLock);
}

/*
 * A change of the table's definition (its triggers among them) or of
 * everything: look the relations up again, and empty the lease cache, which
 * may hold rows from before a change its trigger did not see (lease_cache.c).
 */
static void
le_store_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == le_rels.leases ||
		relid == le_rels.leases_pkey ||
		relid == le_rels.terms_seq || relid == le_rels.lock_key_rel ||
		relid == le_rels.history || relid == le_rels.history_pkey ||
		relid == le_rels.leader_info || relid == le_rels.handovers ||
		relid == le_rels.term_era)
	{
		le_rels.valid = false;
		le_rels_changes++;
		le_cache_forget_all();
	}
}

/*
 * index, if it is a btree index of history on (name text COLLATE "C",
 * term bigint) with the default operator families, else InvalidOid: then the history's
 * highest term is asked with SQL (STMT_HISTORY_MAX).
 */
static void le_history_trim(const char *name);
static void le_history_trim_in_own_call(const char *name);
static void le_get_client_addr(Datum *value, char *null);
static bool le_store_history_max_term_by_index(const char *name, int64 *max_term,
											   int64 *count);

/* history.end_reason of a reason. */
static const char *
le_end_reason_text(LeEndReason reason)
{
	static const char *const reasons[] = {
		[LE_END_RELEASED] = "released",
		[LE_END_EXPIRED] = "expired",
		[LE_END_SESSION_ENDED] = "session_ended",
		[LE_END_MOVED] = "moved",
	};

	return reasons[reason];
}

static Oid
le_store_history_index(Oid history, Oid nsp)
{
	Relation	rel;
	Relation	idx;
	Oid			index;
	bool		ok;

	if (!OidIsValid(history))
		return InvalidOid;
	/*
	 * The table first, then the index's name: the table's lock keeps its
	 * indexes (le_store_open).  One of another table that took the name
	 * may go at any time, hence try_relation_open.
	 */
	rel = le_store_open(history, AccessShareLock);
	index = get_relname_relid("history_pkey", nsp);
	idx = OidIsValid(index) ? try_relation_open(index, AccessShareLock) : NULL;
	if (idx == NULL)
	{
		table_close(rel, AccessShareLock);
		return InvalidOid;
	}
	ok = idx->rd_rel->relkind == RELKIND_INDEX &&
		idx->rd_index->indrelid == history &&
		idx->rd_rel->relam == BTREE_AM_OID &&
		idx->rd_index->indnkeyatts == 2 &&
		idx->rd_index->indkey.values[0] == get_attnum(history, "name") &&
		idx->rd_index->indkey.values[1] == get_attnum(history, "term") &&
		get_atttype(history, idx->rd_index->indkey.values[0]) == TEXTOID &&
		get_atttype(history, idx->rd_index->indkey.values[1]) == INT8OID &&
		idx->rd_opfamily[0] == TEXT_BTREE_FAM_OID &&
		idx->rd_opfamily[1] == INTEGER_BTREE_FAM_OID &&
		idx->rd_indcollation[0] == C_COLLATION_OID &&
		idx->rd_indpred == NIL && RelationGetIndexPredicate(idx) == NIL;
	relation_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return ok ? index : InvalidOid;
}

/* Are rel's columns exactly these, in this order, of these types? */
static bool
le_store_columns_are(Relation rel, int ncols, const char *const *names,
					 const Oid *types)
{
	TupleDesc	desc = RelationGetDescr(rel);

	if (desc->natts != ncols)
		return false;
	for (int i = 0; i < ncols; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || att->atttypid != types[i] ||
			strcmp(NameStr(att->attname), names[i]) != 0)
			return false;
	}
	return true;
}

static void
le_store_check_columns(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	if (desc->natts != LEASE_NCOLS)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("leader_election.leases has %d columns, expected %d",
						desc->natts, LEASE_NCOLS),
				 errdetail("Columns added to the table, even if dropped again, are not supported."),
				 errhint("Dump the rows, then DROP and CREATE EXTENSION leader_election.")));
	for (int i = 0; i < LEASE_NCOLS; i++)
		if (strcmp(NameStr(TupleDescAttr(desc, i)->attname),
				   le_lease_columns[i]) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("leader_election.leases column %d is \"%s\", expected \"%s\"",
							i + 1, NameStr(TupleDescAttr(desc, i)->attname),
							le_lease_columns[i])));
}

/*
 * Is trigger t the lease cache's trigger of that level and those events,
 * firing on every change, even under session_replication_role = replica?
 * Its function must be this library's leases_cache_invalidate itself, not
 * merely something of that name (a replaced body would see nothing).
 */
static bool
le_store_is_cache_trigger(const Trigger *t, bool row_level, int16 events)
{
	FmgrInfo	fn;

	if (t->tgenabled != TRIGGER_FIRES_ALWAYS || !TRIGGER_FOR_AFTER(t->tgtype) ||
		TRIGGER_FOR_ROW(t->tgtype) != row_level ||
		(t->tgtype & events) != events ||
		t->tgnattr != 0 || t->tgnargs != 0 || t->tgqual != NULL)
		return false;
	fmgr_info(t->tgfoid, &fn);
	return fn.fn_addr == le_leases_cache_invalidate;
}

/*
 * Does the table have the lease cache's invalidation triggers (lease_cache.c,
 * and the install script)?  Enabling, disabling or dropping a trigger
 * invalidates the relcache entry, so every backend asks again; a change of
 * the trigger function invalidates it too (catalog_watch.c).  *only_ours
 * says whether there is no other trigger.
 */
static bool
le_store_has_cache_triggers(Relation rel, bool *only_ours)
{
	TriggerDesc *td = rel->trigdesc;
	bool		rows = false;
	bool		truncate = false;

	*only_ours = true;
	if (td == NULL)
		return false;
	for (int i = 0; i < td->numtriggers; i++)
	{
		Trigger    *t = &td->triggers[i];
		bool		r = le_store_is_cache_trigger(t, true, TRIGGER_TYPE_INSERT |
												  TRIGGER_TYPE_UPDATE |
												  TRIGGER_TYPE_DELETE);
		bool		tr = le_store_is_cache_trigger(t, false, TRIGGER_TYPE_TRUNCATE);

		rows |= r;
		truncate |= tr;
		if (!r && !tr)
			*only_ours = false;
	}
	return rows && truncate;
}

/* Are the NOT NULL columns exactly the install script's (name, owner, term)? */
static bool
le_store_not_null_as_installed(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
	{
		bool		installed = (i == COL_NAME || i == COL_OWNER || i == COL_TERM);

		if (TupleDescAttr(desc, i)->attnotnull != installed)
			return false;
	}
	return true;
}

/*
 * May renewals skip the executor (le_store_renew_in_place)?  Only while the
 * table is as installed: only its primary key, which that path maintains
 * itself, and nothing else the executor would apply to an UPDATE: no other
 * trigger, no rule, no CHECK or added NOT NULL constraint, no row-level
 * security that applies
 * to the table's owner (writes run as the owner, whom policies skip unless
 * FORCE ROW LEVEL SECURITY).  An index,
 * trigger or constraint an administrator adds sends renewals through the
 * executor (SPI), which keeps all of them.
 */
static bool
le_store_has_installed_shape(Relation rel, bool only_our_triggers)
{
	List	   *indexes = RelationGetIndexList(rel);
	bool		ok;

	ok = list_length(indexes) == 1 &&
		list_member_oid(indexes, le_rels.leases_pkey) &&
		le_store_columns_are(rel, LEASE_NCOLS, le_lease_columns, le_lease_types) &&
		le_store_not_null_as_installed(rel) &&
		only_our_triggers &&
		rel->rd_rules == NULL &&
		!(rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity) &&
		(rel->rd_att->constr == NULL || rel->rd_att->constr->num_check == 0);
	list_free(indexes);
	return ok;
}

/* The leases table's own triggers: the lease cache's two. */
bool
le_store_is_own_trigger(const Trigger *t)
{
	return le_store_is_cache_trigger(t, true, TRIGGER_TYPE_INSERT |
									 TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE) ||
		le_store_is_cache_trigger(t, false, TRIGGER_TYPE_TRUNCATE);
}

/* le_rel_runs_added_code for a table whose only triggers are the extension's. */
static bool
le_store_runs_added_code(Relation rel)
{
	return le_rel_runs_added_code(rel, NULL);
}

/*
 * test(rel) for another of the extension's tables, or `absent` if it does
 * not exist (the 1.0 objects, before ALTER EXTENSION UPDATE).
 */
static bool
le_store_rel_is(Oid relid, bool (*test) (Relation rel), bool absent)
{
	Relation	rel;
	bool		answer;

	if (!OidIsValid(relid))
		return absent;
	rel = le_store_open(relid, AccessShareLock);
	answer = test(rel);
	table_close(rel, NoLock);
	return answer;
}

static void
le_store_load_rels_once(void)
{
	Oid			nsp;
	Relation	rel;
	bool		only_ours;

	nsp = get_namespace_oid("leader_election", true);
	le_rels.leases = OidIsValid(nsp) ? get_relname_relid("leases", nsp) : InvalidOid;
	le_rels.leases_pkey = OidIsValid(nsp) ? get_relname_relid("leases_pkey", nsp) : InvalidOid;
	if (!OidIsValid(le_rels.leases))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"leader_election\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION leader_election;")));
	if (!OidIsValid(le_rels.leases_pkey))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("leader_election.leases has no primary key named leases_pkey"),
				 errhint("Re-create the constraint, or the extension.")));
	le_rels.terms_seq = get_relname_relid("terms", nsp);
	le_rels.lock_key_rel = get_relname_relid("lock_key", nsp);
	le_rels.lock_key_loaded = false;
	le_rels.history = get_relname_relid("history", nsp);
	le_rels.history_pkey = le_store_history_index(le_rels.history, nsp);
	le_rels.leader_info = get_relname_relid("leader_info", nsp);
	le_rels.handovers = get_relname_relid("handovers", nsp);
	le_rels.term_era = get_relname_relid("term_era", nsp);
	le_rels.has_issue_15 =
		OidIsValid(le_rels.leader_info) && OidIsValid(le_rels.handovers);

	/*
	 * Between installing this library and ALTER EXTENSION UPDATE the
	 * database still has the 1.0 objects: serve them as 1.0 did (terms
	 * old + 1 above the timeline's floor, names counted by a scan), with
	 * writer locks keyed by an all-zero key (every backend runs this
	 * library, so they agree).  The update's CREATE INDEX on the table
	 * invalidates it, so every backend switches at its next call; its
	 * ShareLock waits for the writers in flight.
	 */
	le_rels.schema_1_0 = !OidIsValid(le_rels.terms_seq);
	if (!le_rels.schema_1_0 && !OidIsValid(le_rels.lock_key_rel))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("leader_election.lock_key is missing"),
				 errhint("Re-create the extension, or restore the table.")));

	rel = le_store_open(le_rels.leases, AccessShareLock);
	le_store_check_columns(rel);
	le_rels.table_owner = rel->rd_rel->relowner;
	le_rels.added_code = le_rel_runs_added_code(rel, le_store_is_own_trigger) ||
		le_store_rel_is(le_rels.history, le_store_runs_added_code, false) ||
		le_store_rel_is(le_rels.leader_info, le_store_runs_added_code, false) ||
		le_store_rel_is(le_rels.handovers, le_store_runs_added_code, false) ||
		le_store_rel_is(le_rels.term_era, le_store_runs_added_code, false);
	/*
	 * Code an administrator added may rewrite the rows the extension writes
	 * (a BEFORE trigger setting NEW.expires_at) or write lease rows while
	 * the extension's own write runs (a CHECK constraint's function), and
	 * the cache learns only what the extension meant to write: so no cache
	 * while there is any (owner_rights.c says what counts).
	 */
	le_rels.cache_triggers_ok = le_store_has_cache_triggers(rel, &only_ours) &&
		only_ours && !le_rels.added_code;
	le_rels.fast_path_ok = le_store_has_installed_shape(rel, only_ours) &&
		le_direct_insert_allowed(rel, le_rels.leases_pkey, true);
	table_close(rel, NoLock);
	le_rels.history_direct_ok = false;
	if (OidIsValid(le_rels.history) && OidIsValid(le_rels.history_pkey))
	{
		rel = le_store_open(le_rels.history, AccessShareLock);
		le_rels.history_direct_ok =
			le_store_columns_are(rel, HISTORY_NCOLS, le_history_columns,
								 le_history_types) &&
			le_direct_insert_allowed(rel, le_rels.history_pkey, false);
		table_close(rel, NoLock);
	}
}

/*
 * Look the extension's relations up, and what their shape allows, unless
 * le_rels is still valid.  The locks taken while looking may process
 * invalidations of DDL that committed meanwhile (le_rels_changes): then
 * what was read may be stale, and it is read again.
 */
static void
le_store_load_rels(void)
{
	if (le_rels.valid)
		return;
	if (!le_rels_callback_registered)
	{
		CacheRegisterRelcacheCallback(le_store_invalidate, (Datum) 0);
		le_rels_callback_registered = true;
	}
	for (;;)
	{
		uint64		changes = le_rels_changes;

		le_rels_loading = true;
		PG_TRY();
		{
			le_store_load_rels_once();
		}
		PG_FINALLY();
		{
			le_rels_loading = false;
		}
		PG_END_TRY();
		if (changes == le_rels_changes)
			break;
	}
	le_rels.valid = true;
}

/*
 * The name administration functions (name_admin.c) start here, before the
 * name's writer lock: the leases table locked for writing, through
 * le_store_open.  Their next statements are SQL, whose parser would report
 * a DROP they waited for with 42P01; waiting here reports it with 55000.
 * They write the table anyway, so the lock is theirs to the end of the
 * transaction.  Tries do not do this: a losing try must not wait for a
 * table lock (a SHARE lock, a queued CREATE INDEX), nor keep one.
 */
void
le_store_lock_for_admin_change(void)
{
	le_store_load_rels();
	table_close(le_store_open(le_rels.leases, RowExclusiveLock), NoLock);
}

/* Is the extension installed in this database (it may have been dropped)? */
bool
le_extension_installed(void)
{
	return OidIsValid(get_extension_oid("leader_election", true));
}

/* The OID of leader_election.leases in this database, or InvalidOid. */
Oid
le_store_leases_relid(void)
{
	Oid			nsp = get_namespace_oid("leader_election", true);

	return OidIsValid(nsp) ? get_relname_relid("leases", nsp) : InvalidOid;
}

/* Fill *row from one lease tuple's columns; strings go to CurrentMemoryContext. */
static void
le_row_from_datums(Datum *values, bool *nulls, LeaseRow *row)
{
	memset(row, 0, sizeof(LeaseRow));
	row->found = true;
	row->owner = DatumGetObjectId(values[COL_OWNER]);
	row->holder = nulls[COL_HOLDER] ? NULL : TextDatumGetCString(values[COL_HOLDER]);
	row->term = DatumGetInt64(values[COL_TERM]);
	row->acquired_at = nulls[COL_ACQUIRED_AT] ? 0 : DatumGetTimestampTz(values[COL_ACQUIRED_AT]);
	row->renewed_at = nulls[COL_RENEWED_AT] ? 0 : DatumGetTimestampTz(values[COL_RENEWED_AT]);
	row->expires_at = nulls[COL_EXPIRES_AT] ? 0 : DatumGetTimestampTz(values[COL_EXPIRES_AT]);
	row->session_pid = nulls[COL_SESSION_PID] ? 0 : DatumGetInt32(values[COL_SESSION_PID]);
	row->session_start = nulls[COL_SESSION_START] ? 0 : DatumGetTimestampTz(values[COL_SESSION_START]);
	row->holder_pid = nulls[COL_HOLDER_PID] ? 0 : DatumGetInt32(values[COL_HOLDER_PID]);
	row->holder_role = nulls[COL_HOLDER_ROLE] ? InvalidOid : DatumGetObjectId(values[COL_HOLDER_ROLE]);
	row->application_name = nulls[COL_APPLICATION_NAME] ? NULL :
		TextDatumGetCString(values[COL_APPLICATION_NAME]);
	row->client_addr_null = nulls[COL_CLIENT_ADDR];
	if (!row->client_addr_null)
		row->client_addr = datumCopy(values[COL_CLIENT_ADDR], false, -1);
}

/* An index lookup of one name, as le_store_read and the renewal use it. */
typedef struct LeLookup
{
	Relation	rel;
	Relation	idx;
	ScanKeyData key;
	Snapshot	snap;
	TupleTableSlot *slot;
	IndexScanDesc scan;
} LeLookup;

/*
 * Find the name's row as committed at this instant (a fresh snapshot,
 * whatever the isolation level and however old the calling statement is);
 * true if there is one.
 */
static bool
le_lookup_begin(LeLookup *lk, const char *name, LOCKMODE lockmode)
{
	le_store_load_rels();
	lk->rel = le_store_open(le_rels.leases, lockmode);
	lk->idx = index_open(le_rels.leases_pkey, lockmode);
	ScanKeyEntryInitialize(&lk->key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ,
						   PointerGetDatum(cstring_to_text(name)));
	lk->snap = RegisterSnapshot(GetLatestSnapshot());
	lk->slot = table_slot_create(lk->rel, NULL);
	lk->scan = le_index_beginscan(lk->rel, lk->idx, lk->snap, 1, 0);
	index_rescan(lk->scan, &lk->key, 1, NULL, 0);
	if (!index_getnext_slot(lk->scan, ForwardScanDirection, lk->slot))
		return false;
	slot_getallattrs(lk->slot);
	return true;
}

/* Relation locks are kept until the end of the transaction. */
static void
le_lookup_end(LeLookup *lk)
{
	index_endscan(lk->scan);
	ExecDropSingleTupleTableSlot(lk->slot);
	UnregisterSnapshot(lk->snap);
	index_close(lk->idx, NoLock);
	table_close(lk->rel, NoLock);
}

/* The row as committed at this instant, whatever the isolation level. */
void
le_store_read(const char *name, LeaseRow *row)
{
	LeLookup	lk;

	if (le_lookup_begin(&lk, name, AccessShareLock))
		le_row_from_datums(lk.slot->tts_values, lk.slot->tts_isnull, row);
	else
	{
		memset(row, 0, sizeof(LeaseRow));
		row->found = false;
	}
	le_lookup_end(&lk);
}

/*
 * May answers read the lease cache (lease_cache.c) now?  Not once this
 * transaction has written or fenced a lease: the cache holds committed rows
 * only.  Not under REPEATABLE READ or SERIALIZABLE, where answers keep
 * reading the table (SERIALIZABLE's predicate locks need the read).
 */
static bool
le_store_cache_usable(void)
{
	/*
	 * Answers from the cache open no relation, so nothing else would notice
	 * a trigger disabled since this transaction began; this is cheap when
	 * nothing is queued.
	 */
	if (IsolationUsesXactSnapshot() || !le_cache_available() ||
		le_xact_touched_any())
		return false;
	AcceptInvalidationMessages();
	le_store_load_rels();
	return le_rels.cache_triggers_ok;
}

/*
 * The row for an answer that writes nothing (am_leader, leader_term, and the
 * first look of try_acquire_leader and release_leader): only the decision
 * fields (found, owner, holder, term, expires_at, session_pid,
 * session_start) are filled in.
 *
 * It is the latest committed row at an instant inside the call (I5): from
 * the lease cache when it may be used and can answer, else from the table
 * with a fresh snapshot (which then fills the cache).
 */
void
le_store_read_for_answer(const char *name, LeaseRow *row)
{
	if (le_store_cache_usable())
	{
		if (le_cache_lookup(le_rels.leases, name, row))
			return;
		le_store_read(name, row);
		le_cache_fill(le_rels.leases, name, row);
		return;
	}
	le_store_read(name, row);
}

/* The whole row, for current_leader: always from the table, fresh. */
void
le_store_read_row_for_answer(const char *name, LeaseRow *row)
{
	le_store_read(name, row);
}

static void le_store_note_renewal(const char *name, const LeaseRow *before,
								  TimestampTz expires);
static void le_holder_details(Datum *pid, Datum *role, Datum *appname,
							  char *appname_null, Datum *addr, char *addr_null);

/*
 * Renewal without the executor, the hot path under READ COMMITTED.  The
 * caller holds the writer lock, so no other transaction can be changing the
 * row; the lookup sees its latest version.  Only columns that no index
 * covers change, so heap_update makes it a HOT update, unless the page is
 * full: then the primary key gets an entry for the new version, as the
 * executor would add it.  Used only while the table has its installed shape
 * (le_store_has_installed_shape): that index and nothing else.
 */
typedef enum LeInPlace
{
	LE_IN_PLACE_RENEWED,
	LE_IN_PLACE_CHANGED,		/* the row changed: not renewed */
	LE_IN_PLACE_NOT_ALLOWED		/* the table's shape changed: use the executor */
} LeInPlace;

static LeInPlace
le_store_renew_in_place(const char *name, const LeaseRow *row,
						TimestampTz now, TimestampTz expires)
{
	LeLookup	lk;
	bool		renewed = false;
	LeaseRow	updated = *row;
	bool		found = le_lookup_begin(&lk, name, RowExclusiveLock);

	/*
	 * Taking RowExclusiveLock processed the invalidations of DDL committed
	 * since this transaction last locked the table (an index or trigger
	 * added while it held only AccessShareLock): decide again on the shape
	 * the lock now covers, as the executor opens indexes after locking.
	 */
	le_store_load_rels();
	if (!le_rels.fast_path_ok)
	{
		le_lookup_end(&lk);
		return LE_IN_PLACE_NOT_ALLOWED;
	}
	if (found &&
		!lk.slot->tts_isnull[COL_HOLDER] &&
		DatumGetInt64(lk.slot->tts_values[COL_TERM]) == row->term &&
		strcmp(TextDatumGetCString(lk.slot->tts_values[COL_HOLDER]), row->holder) == 0)
	{
		Datum		values[LEASE_NCOLS] = {0};
		bool		nulls[LEASE_NCOLS] = {0};
		bool		replace[LEASE_NCOLS] = {0};
		char		appname_null;
		char		addr_null;
		bool		shouldfree;
		HeapTuple	oldtup;
		HeapTuple	newtup;
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		TM_Result	result;

		values[COL_RENEWED_AT] = TimestampTzGetDatum(now);
		values[COL_EXPIRES_AT] = TimestampTzGetDatum(expires);
		le_holder_details(&values[COL_HOLDER_PID], &values[COL_HOLDER_ROLE],
						  &values[COL_APPLICATION_NAME], &appname_null,
						  &values[COL_CLIENT_ADDR], &addr_null);
		nulls[COL_APPLICATION_NAME] = (appname_null == 'n');
		nulls[COL_CLIENT_ADDR] = (addr_null == 'n');
		replace[COL_RENEWED_AT] = replace[COL_EXPIRES_AT] = true;
		replace[COL_HOLDER_PID] = replace[COL_HOLDER_ROLE] = true;
		replace[COL_APPLICATION_NAME] = replace[COL_CLIENT_ADDR] = true;

		/* As UPDATE: refused under a publication the table cannot serve. */
		CheckCmdReplicaIdentity(lk.rel, CMD_UPDATE);
		oldtup = ExecFetchSlotHeapTuple(lk.slot, false, &shouldfree);
		newtup = heap_modify_tuple(oldtup, RelationGetDescr(lk.rel),
								   values, nulls, replace);
		result = le_heap_update(lk.rel, &oldtup->t_self, newtup,
								GetCurrentCommandId(true), &tmfd, &lockmode);
		if (result == TM_Ok)
		{
			if (!HeapTupleIsHeapOnly(newtup))
			{
				Datum		key = lk.slot->tts_values[COL_NAME];
				bool		key_null = false;

				index_insert(lk.idx, &key, &key_null, &newtup->t_self, lk.rel,
							 UNIQUE_CHECK_YES, true, BuildIndexInfo(lk.idx));
			}
			renewed = true;
			/* What the cache learns is the row as updated, not as first seen. */
			updated.owner = DatumGetObjectId(lk.slot->tts_values[COL_OWNER]);
			updated.session_pid = lk.slot->tts_isnull[COL_SESSION_PID] ? 0 :
				DatumGetInt32(lk.slot->tts_values[COL_SESSION_PID]);
			updated.session_start = lk.slot->tts_isnull[COL_SESSION_START] ? 0 :
				DatumGetTimestampTz(lk.slot->tts_values[COL_SESSION_START]);
		}
		else if (result != TM_Updated && result != TM_Deleted)
			elog(ERROR, "unexpected result %d renewing lease \"%s\"",
				 (int) result, name);
		if (shouldfree)
			heap_freetuple(oldtup);
	}
	le_lookup_end(&lk);
	if (renewed)
	{
		le_store_note_renewal(name, &updated, expires);
		CommandCounterIncrement();	/* later reads in this transaction see it */
	}
	return renewed ? LE_IN_PLACE_RENEWED : LE_IN_PLACE_CHANGED;
}

/*
 * SPI plumbing.  Each statement is prepared on first use and kept for the
 * life of the backend; the plan cache re-plans it if the table is replaced.
 */
typedef enum LeStmt
{
	STMT_INSERT,
	STMT_INSERT_WITH_HISTORY,
	STMT_TAKE_OVER_WITH_HISTORY,
	STMT_RESERVE,
	STMT_RENEW,
	STMT_TAKE_OVER,
	STMT_RELEASE,
	STMT_LOCK_FOR_TAKEOVER,
	STMT_LOCK_FOR_FENCE,
	STMT_VISIBLE_TO_SNAPSHOT,
	STMT_HISTORY_BEGIN,
	STMT_HISTORY_TRIM,
	STMT_HISTORY_END,
	STMT_HISTORY_MAX,
	STMT_ADVANCE_TERMS,
	STMT_INFO_SET,
	STMT_INFO_CLEAR,
	STMT_INFO_READ,
	STMT_HANDOVER_SET,
	STMT_HANDOVER_RESTAMP,
	STMT_HANDOVER_READ,
	STMT_COUNT
} LeStmt;

typedef struct LeStmtDef
{
	const char *sql;
	int			nargs;
	Oid			argtypes[18];
} LeStmtDef;

static const LeStmtDef le_stmts[STMT_COUNT] = {
	[STMT_INSERT] = {
		"INSERT INTO leader_election.leases (" LE_SELECT_COLUMNS ") "
		"VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10, $11, $12)",
		12, {TEXTOID, OIDOID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		INT4OID, TIMESTAMPTZOID, INT4OID, OIDOID, TEXTOID, INETOID}
	},
	/* STMT_INSERT and the term's history row, in one statement. */
	[STMT_INSERT_WITH_HISTORY] = {
		"WITH lease AS (INSERT INTO leader_election.leases (" LE_SELECT_COLUMNS ") "
		"VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING 1) "
		"INSERT INTO leader_election.history "
		"(name, term, holder, owner, session_bound, holder_pid, acquired_at) "
		"SELECT $1, $4, $3, $2, $13, $14, $5 FROM lease",
		14, {TEXTOID, OIDOID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		INT4OID, TIMESTAMPTZOID, INT4OID, OIDOID, TEXTOID, INETOID, BOOLOID, INT4OID}
	},
	/*
	 * STMT_TAKE_OVER, the end of the old term in the history ($15: if it had
	 * a holder) and the new term's history row, in one statement.
	 */
	[STMT_TAKE_OVER_WITH_HISTORY] = {
		"WITH ended AS (UPDATE leader_election.history SET ended_at = $13, end_reason = $14 "
		"WHERE $15 AND name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2 "
		"AND ended_at IS NULL RETURNING 1), "
		"lease AS (UPDATE leader_election.leases SET holder = $3, term = $4, "
		"acquired_at = $5, renewed_at = $5, expires_at = $6, session_pid = $7, "
		"session_start = $8, holder_pid = $9, holder_role = $10, "
		"application_name = $11, client_addr = $12 "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2 RETURNING 1) "
		"INSERT INTO leader_election.history "
		"(name, term, holder, owner, session_bound, holder_pid, acquired_at) "
		"SELECT $1, $4, $3, $16, $17, $18, $5 FROM lease",
		18, {TEXTOID, INT8OID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		INT4OID, TIMESTAMPTZOID, INT4OID, OIDOID, TEXTOID, INETOID,
		TIMESTAMPTZOID, TEXTOID, BOOLOID, OIDOID, BOOLOID, INT4OID}
	},
	/* A name owned and never held: no holder, term 0 (as assign_name). */
	[STMT_RESERVE] = {
		"INSERT INTO leader_election.leases (name, owner, term) VALUES ($1, $2, 0)",
		2, {TEXTOID, OIDOID}
	},
	[STMT_RENEW] = {
		"UPDATE leader_election.leases SET renewed_at = $4, expires_at = $5, "
		"holder_pid = $6, holder_role = $7, application_name = $8, client_addr = $9 "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2 "
		"AND holder OPERATOR(pg_catalog.=) $3 "
		"RETURNING owner, session_pid, session_start",
		9, {TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID,
		OIDOID, TEXTOID, INETOID}
	},
	[STMT_TAKE_OVER] = {
		"UPDATE leader_election.leases SET holder = $3, term = $4, "
		"acquired_at = $5, renewed_at = $5, expires_at = $6, session_pid = $7, "
		"session_start = $8, holder_pid = $9, holder_role = $10, "
		"application_name = $11, client_addr = $12 "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2",
		12, {TEXTOID, INT8OID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		INT4OID, TIMESTAMPTZOID, INT4OID, OIDOID, TEXTOID, INETOID}
	},
	[STMT_RELEASE] = {
		"UPDATE leader_election.leases SET holder = NULL, expires_at = $3, "
		"session_pid = NULL, session_start = NULL "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2 "
		"RETURNING owner",
		3, {TEXTOID, INT8OID, TIMESTAMPTZOID}
	},
	[STMT_LOCK_FOR_TAKEOVER] = {
		"SELECT 1 FROM leader_election.leases "
		"WHERE name OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED",
		1, {TEXTOID}
	},
	[STMT_LOCK_FOR_FENCE] = {
		"SELECT 1 FROM leader_election.leases "
		"WHERE name OPERATOR(pg_catalog.=) $1 FOR KEY SHARE SKIP LOCKED",
		1, {TEXTOID}
	},
	[STMT_VISIBLE_TO_SNAPSHOT] = {
		"SELECT 1 FROM leader_election.leases "
		"WHERE name OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
	[STMT_HISTORY_BEGIN] = {
		"INSERT INTO leader_election.history "
		"(name, term, holder, owner, session_bound, holder_pid, acquired_at) "
		"VALUES ($1, $2, $3, $4, $5, $6, $7)",
		7, {TEXTOID, INT8OID, TEXTOID, OIDOID, BOOLOID, INT4OID, TIMESTAMPTZOID}
	},
	[STMT_HISTORY_TRIM] = {
		"DELETE FROM leader_election.history "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.<=) "
		"(SELECT h.term FROM leader_election.history h "
		" WHERE h.name OPERATOR(pg_catalog.=) $1 "
		" ORDER BY h.term DESC OFFSET $2 LIMIT 1)",
		2, {TEXTOID, INT8OID}
	},
	[STMT_HISTORY_MAX] = {
		"SELECT pg_catalog.max(term), pg_catalog.count(*) FROM leader_election.history "
		"WHERE name OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
	/* Only forward: to at least $1 (a no-op, nothing written, if there). */
	[STMT_ADVANCE_TERMS] = {
		"SELECT pg_catalog.setval('leader_election.terms', $1) "
		"FROM leader_election.terms AS s WHERE s.last_value OPERATOR(pg_catalog.<) $1",
		1, {INT8OID}
	},
	[STMT_INFO_SET] = {
		"INSERT INTO leader_election.leader_info AS i "
		"(name, term, info, updated_at, acquired_at) "
		"VALUES ($1, $2, $3, $4, $5) ON CONFLICT ON CONSTRAINT leader_info_pkey "
		"DO UPDATE SET term = EXCLUDED.term, info = EXCLUDED.info, "
		"updated_at = EXCLUDED.updated_at, acquired_at = EXCLUDED.acquired_at",
		5, {TEXTOID, INT8OID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[STMT_INFO_CLEAR] = {
		"DELETE FROM leader_election.leader_info WHERE name OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
	[STMT_INFO_READ] = {
		"SELECT info FROM leader_election.leader_info "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2 "
		"AND acquired_at OPERATOR(pg_catalog.=) $3",
		3, {TEXTOID, INT8OID, TIMESTAMPTZOID}
	},
	[STMT_HANDOVER_SET] = {
		"INSERT INTO leader_election.handovers AS h "
		"(name, term, previous_holder, successor, reason, reserved_until, ended_at) "
		"VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT ON CONSTRAINT handovers_pkey "
		"DO UPDATE SET term = EXCLUDED.term, previous_holder = EXCLUDED.previous_holder, "
		"successor = EXCLUDED.successor, reason = EXCLUDED.reason, "
		"reserved_until = EXCLUDED.reserved_until, ended_at = EXCLUDED.ended_at",
		7, {TEXTOID, INT8OID, TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[STMT_HANDOVER_RESTAMP] = {
		"UPDATE leader_election.handovers SET reserved_until = $4 "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2 "
		"AND ended_at OPERATOR(pg_catalog.=) $3",
		4, {TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[STMT_HANDOVER_READ] = {
		"SELECT previous_holder, successor, reason, reserved_until "
		"FROM leader_election.handovers "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2 "
		"AND ended_at OPERATOR(pg_catalog.=) $3",
		3, {TEXTOID, INT8OID, TIMESTAMPTZOID}
	},
	[STMT_HISTORY_END] = {
		"UPDATE leader_election.history SET ended_at = $3, end_reason = $4 "
		"WHERE name OPERATOR(pg_catalog.=) $1 AND term OPERATOR(pg_catalog.=) $2 "
		"AND ended_at IS NULL",
		4, {TEXTOID, INT8OID, TIMESTAMPTZOID, TEXTOID}
	},
};

static SPIPlanPtr le_plans[STMT_COUNT];

/* State kept between le_spi_begin and le_spi_end. */
typedef struct LeSpiCall
{
	MemoryContext caller_cxt;
	LeOwnerRights rights;
} LeSpiCall;

/*
 * For owner_rights.c's O3: lock every table a statement of this file may
 * touch, as the statements will (for writing, unless the transaction
 * cannot write), then say whether any carries added code.  Taking the
 * locks processes the DDL that committed before them; none that could add
 * code can commit after them.
 */
static bool
le_store_lock_and_decide(void)
{
	LOCKMODE	mode = XactReadOnly || RecoveryInProgress() ?
		AccessShareLock : RowExclusiveLock;
	Oid			rels[] = {le_rels.leases, le_rels.history, le_rels.leader_info,
		le_rels.handovers, le_rels.term_era};

	for (int i = 0; i < lengthof(rels); i++)
		if (OidIsValid(rels[i]))
			table_close(le_store_open(rels[i], mode), NoLock);
	le_store_load_rels();
	return le_rels.added_code;
}

/* owner_rights.c's O3 for the administrator's name functions (name_admin.c). */
void
le_store_refuse_temp_objects(void)
{
	le_store_load_rels();
	le_owner_rights_refuse_temp(le_store_lock_and_decide);
}

static void
le_spi_begin(LeSpiCall *call)
{
	le_store_load_rels();
	call->caller_cxt = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	le_owner_rights_begin_statements(&call->rights, le_rels.table_owner,
									 le_store_lock_and_decide);
}

static void
le_spi_end(LeSpiCall *call)
{
	le_owner_rights_end(&call->rights);
	SPI_finish();
}

/*
 * The statement's kept plan, prepared on first use.  Generic from the first
 * execution: every statement finds rows through a primary key, so custom
 * plans (by default the first five executions in each backend) would only
 * plan the same thing again, on the paths that matter most when a
 * connection is new (a cron job's, a storm's waiter's).
 */
static SPIPlanPtr
le_spi_plan(LeStmt stmt)
{
	if (le_plans[stmt] == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare_cursor(le_stmts[stmt].sql, le_stmts[stmt].nargs,
											  (Oid *) le_stmts[stmt].argtypes,
											  CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 le_stmts[stmt].sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		le_plans[stmt] = plan;
	}
	return le_plans[stmt];
}

static int
le_spi_run(LeStmt stmt, Datum *values, const char *nulls, bool read_only)
{
	int			rc;

	(void) le_spi_plan(stmt);
	if (!read_only)
		le_cache_own_write_begin();
	rc = SPI_execute_plan(le_plans[stmt], values, nulls, read_only, 0);
	if (!read_only)
		le_cache_own_write_end();
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s",
			 le_stmts[stmt].sql, SPI_result_code_string(rc));
	return rc;
}

/*
 * Run a read-only statement on the state committed at this instant, whatever
 * the isolation level (as le_store_read reads the lease row).
 */
static void
le_spi_read_fresh(LeStmt stmt, Datum *values, const char *nulls)
{
	int			rc;

	rc = SPI_execute_snapshot(le_spi_plan(stmt), values, nulls,
							  GetLatestSnapshot(), InvalidSnapshot,
							  true, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_snapshot failed for \"%s\": %s",
			 le_stmts[stmt].sql, SPI_result_code_string(rc));
}

/*
 * Does a takeover run as the one statement STMT_TAKE_OVER_WITH_HISTORY?
 * Not while history is off, nor while the table has lost its installed
 * shape: a rule, for one, forbids UPDATE in WITH.  (Relations loaded.)
 */
static bool
le_store_takeover_in_one_statement(void)
{
	return le_history_max_terms > 0 && le_rels.fast_path_ok;
}

/* Prepare stmt and build its generic plan now, not at its first run. */
static void
le_spi_build_generic_plan(LeStmt stmt)
{
	CachedPlan *cplan = SPI_plan_get_cached_plan(le_spi_plan(stmt));

	if (cplan != NULL)
		ReleaseCachedPlan(cplan, CurrentResourceOwner);
}

/*
 * What le_store_terms_next touches for the first time in a backend, touched
 * now: the counter's page (nextval changes it), its catalog entry (a catalog
 * scan while cold) and the lock taken around it.  Draws nothing.
 */
static void
le_prepare_terms_counter(void)
{
	Relation	seq;
	Buffer		buf;
	HeapTuple	seqtup;
	LOCKTAG		tag;

	if (!OidIsValid(le_rels.terms_seq))
		return;
	seq = try_relation_open(le_rels.terms_seq, AccessShareLock);
	if (seq == NULL)
		le_store_dropped();
	if (seq->rd_rel->relkind != RELKIND_SEQUENCE)
	{
		/* A broken install: nextval reports it when a grant needs a term. */
		relation_close(seq, NoLock);
		return;
	}
	buf = ReadBuffer(seq, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	UnlockReleaseBuffer(buf);
	relation_close(seq, NoLock);
	seqtup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(le_rels.terms_seq));
	if (HeapTupleIsValid(seqtup))
		ReleaseSysCache(seqtup);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, LE_LOCKTAG_TERMS);
	if (LockAcquire(&tag, ShareLock, true, true) != LOCKACQUIRE_NOT_AVAIL)
		LockRelease(&tag, ShareLock, true);
}

/*
 * Plan now what a takeover will run (lease.c, le_prepare_takeover):
 * planning was about half of what a storm's waiter did when it won.  Under
 * READ COMMITTED with the tables as installed that is the history's CHECK
 * constraints (the direct path, le_store_take_over_direct), else the
 * generic plans of its statements.  The caller's subtransaction gives back
 * the locks planning takes.
 */
void
le_store_prepare_takeover(const char *name)
{
	LeSpiCall	call;

	le_store_load_rels();
	if (!IsolationUsesXactSnapshot() && le_history_max_terms > 0 &&
		le_rels.fast_path_ok && le_rels.history_direct_ok)
	{
		Relation	history = le_store_open(le_rels.history, AccessShareLock);
		Relation	leases = le_store_open(le_rels.leases, AccessShareLock);
		LeaseRow	row;
		int64		max_term;
		int64		count;
		Datum		addr;
		char		addr_null;

		le_direct_prepare(history);
		le_direct_prepare(leases);
		table_close(leases, NoLock);
		table_close(history, NoLock);
		/*
		 * And the takeover's reads once, so that what they touch for the
		 * first time in this backend (catalog entries, the pages of shared
		 * memory they map) is not touched first in the instant it wins.
		 */
		le_store_read(name, &row);
		(void) le_store_history_max_term_by_index(name, &max_term, &count);
		le_prepare_terms_counter();
		/* The client address the new row records, looked up once. */
		le_get_client_addr(&addr, &addr_null);
		return;
	}
	le_spi_begin(&call);
	le_spi_build_generic_plan(STMT_LOCK_FOR_TAKEOVER);
	le_spi_build_generic_plan(le_store_takeover_in_one_statement() ?
							  STMT_TAKE_OVER_WITH_HISTORY : STMT_TAKE_OVER);
	le_spi_end(&call);
}

/* Under REPEATABLE READ the row may be invisible to our older snapshot. */
static void
le_expect_one_row(const char *what)
{
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access to the lease: %s", what),
				 errdetail("The lease row changed after this transaction's snapshot was taken."),
				 errhint("Retry the transaction.")));
}

static Datum le_client_addr;
static bool le_client_addr_null;
static bool le_client_addr_known = false;

/* The caller's client address as inet; NULL for Unix sockets. */
static void
le_get_client_addr(Datum *value, char *null)
{
	if (!le_client_addr_known)
	{
		LOCAL_FCINFO(fcinfo, 0);
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		InitFunctionCallInfoData(*fcinfo, NULL, 0, InvalidOid, NULL, NULL);
		le_client_addr = inet_client_addr(fcinfo);
		le_client_addr_null = fcinfo->isnull;
		MemoryContextSwitchTo(old);
		le_client_addr_known = true;
	}
	*value = le_client_addr;
	*null = le_client_addr_null ? 'n' : ' ';
}

/* The "who holds it" columns shared by insert, renew and take-over. */
static void
le_holder_details(Datum *pid, Datum *role, Datum *appname, char *appname_null,
				  Datum *addr, char *addr_null)
{
	*pid = Int32GetDatum(MyProcPid);
	*role = ObjectIdGetDatum(GetUserId());
	if (application_name != NULL && application_name[0] != '\0')
	{
		*appname = CStringGetTextDatum(application_name);
		*appname_null = ' ';
	}
	else
	{
		*appname = (Datum) 0;
		*appname_null = 'n';
	}
	le_get_client_addr(addr, addr_null);
}

static void
le_session_columns(const LeIdentity *who, Datum *pid, char *pid_null,
				   Datum *start, char *start_null)
{
	if (who->session_bound)
	{
		*pid = Int32GetDatum(MyProcPid);
		*start = TimestampTzGetDatum(le_session_start_value());
		*pid_null = *start_null = ' ';
	}
	else
	{
		*pid = *start = (Datum) 0;
		*pid_null = *start_null = 'n';
	}
}

/*
 * Tell the lease cache what this transaction wrote (lease_cache.c publishes
 * it at commit): the decision fields of the new row.
 */
static void
le_store_note_grant(const char *name, const LeIdentity *who, Oid owner,
					int64 term, TimestampTz expires)
{
	LeaseRow	row = {0};

	row.found = true;
	row.owner = owner;
	row.holder = who->holder;
	row.term = term;
	row.expires_at = expires;
	if (who->session_bound)
	{
		row.session_pid = MyProcPid;
		row.session_start = le_session_start_value();
	}
	le_cache_note_write(le_rels.leases, name, &row);
}

static void
le_store_note_renewal(const char *name, const LeaseRow *before,
					  TimestampTz expires)
{
	LeaseRow	row = *before;

	row.expires_at = expires;
	le_cache_note_write(le_rels.leases, name, &row);
}

/*
 * le_store_insert's two rows without the executor (direct_write.c), if both
 * tables have the shape that allows it once locked for writing; false (and
 * nothing written) if not.  v and n are STMT_INSERT_WITH_HISTORY's
 * parameters.  Like every write, as the tables' owner: CHECK constraints
 * are evaluated with the owner's rights, as through SPI.
 */
static bool
le_store_insert_direct(Datum *v, const char *n)
{
	Relation	leases;
	Relation	history;
	Relation	leases_pkey;
	Relation	history_pkey;
	Datum		lv[LEASE_NCOLS];
	bool		ln[LEASE_NCOLS];
	Datum		hv[HISTORY_NCOLS];
	bool		hn[HISTORY_NCOLS] = {0};
	LeOwnerRights rights;

	le_store_load_rels();
	if (!le_rels.fast_path_ok || !le_rels.history_direct_ok)
		return false;
	leases = le_store_open(le_rels.leases, RowExclusiveLock);
	history = le_store_open(le_rels.history, RowExclusiveLock);
	/* The locks processed DDL committed since: decide on what they cover. */
	le_store_load_rels();
	if (!le_rels.fast_path_ok || !le_rels.history_direct_ok)
	{
		table_close(history, NoLock);
		table_close(leases, NoLock);
		return false;
	}
	leases_pkey = index_open(le_rels.leases_pkey, RowExclusiveLock);
	history_pkey = index_open(le_rels.history_pkey, RowExclusiveLock);

	/* STMT_INSERT's VALUES ($1, $2, $3, $4, $5, $5, $6, ... $12) */
	for (int i = 0, p = 0; i < LEASE_NCOLS; i++)
	{
		lv[i] = v[p];
		ln[i] = n[p] == 'n';
		if (i != COL_ACQUIRED_AT)
			p++;
	}
	hv[HCOL_NAME] = v[0];
	hv[HCOL_TERM] = v[3];
	hv[HCOL_HOLDER] = v[2];
	hv[HCOL_OWNER] = v[1];
	hv[HCOL_SESSION_BOUND] = v[12];
	hv[HCOL_HOLDER_PID] = v[13];
	hv[HCOL_ACQUIRED_AT] = v[4];
	hn[HCOL_ENDED_AT] = hn[HCOL_END_REASON] = true;

	le_owner_rights_begin(&rights, le_rels.table_owner, le_rels.added_code);
	le_direct_insert(leases, leases_pkey, lv, ln);
	le_direct_insert(history, history_pkey, hv, hn);
	le_owner_rights_end(&rights);

	index_close(history_pkey, NoLock);
	index_close(leases_pkey, NoLock);
	table_close(history, NoLock);
	table_close(leases, NoLock);
	return true;
}

void
le_store_insert(const char *name, const LeIdentity *who, int64 term,
				TimestampTz now, TimestampTz expires)
{
	LeSpiCall	call;
	Datum		v[14];
	char		n[15] = "              ";
	bool		with_history = le_history_max_terms > 0;

	le_lock_new_owner(GetUserId(), true);
	v[0] = CStringGetTextDatum(name);
	v[1] = ObjectIdGetDatum(GetUserId());

	v[2] = CStringGetTextDatum(who->holder);
	v[3] = Int64GetDatum(term);
	v[4] = TimestampTzGetDatum(now);
	v[5] = TimestampTzGetDatum(expires);
	le_session_columns(who, &v[6], &n[6], &v[7], &n[7]);
	le_holder_details(&v[8], &v[9], &v[10], &n[10], &v[11], &n[11]);
	v[12] = BoolGetDatum(who->session_bound);
	v[13] = Int32GetDatum(MyProcPid);

	if (with_history && le_store_insert_direct(v, n))
	{
		le_history_trim_in_own_call(name);
		le_store_note_grant(name, who, GetUserId(), term, expires);
		return;
	}

	le_spi_begin(&call);
	if (with_history && le_rels.fast_path_ok)
		le_spi_run(STMT_INSERT_WITH_HISTORY, v, n, false);
	else
	{
		/* A rule on the table cannot be combined with WITH: one at a time. */
		Datum		h[7] = {v[0], v[3], v[2], v[1], v[12], v[13], v[4]};

		le_spi_run(STMT_INSERT, v, n, false);
		if (with_history)
			le_spi_run(STMT_HISTORY_BEGIN, h, NULL, false);
	}
	if (with_history)
		le_history_trim(name);
	le_spi_end(&call);
	le_store_note_grant(name, who, GetUserId(), term, expires);
}

/*
 * Give the name to the current role without taking its lease: a row with
 * no holder and term 0, which the first acquisition takes over like a
 * released lease.  The caller holds the name's writer lock and has seen
 * that there is no row.
 */
void
le_store_reserve(const char *name)
{
	LeSpiCall	call;
	Datum		v[2];
	LeaseRow	row = {0};

	le_lock_new_owner(GetUserId(), true);
	v[0] = CStringGetTextDatum(name);
	v[1] = ObjectIdGetDatum(GetUserId());
	le_spi_begin(&call);
	le_spi_run(STMT_RESERVE, v, NULL, false);
	le_spi_end(&call);
	CommandCounterIncrement();
	/* Like every write of this file, told to the lease cache (C1). */
	row.found = true;
	row.owner = GetUserId();
	le_cache_note_write(le_rels.leases, name, &row);
}

/*
 * Renew the lease `row` shows, if it still has that holder and term: true if
 * renewed, false if the row changed since `row` was read.  Under REPEATABLE
 * READ or SERIALIZABLE the update goes through the executor, which checks
 * the row against the transaction's snapshot; a row the snapshot cannot see
 * is a serialization failure there.  Under READ COMMITTED the in-place path
 * is used while the table has its installed shape, else the executor.
 */
bool
le_store_renew(const char *name, const LeaseRow *row, TimestampTz now,
			   TimestampTz expires)
{
	LeSpiCall	call;
	Datum		v[9];
	char		n[10] = "         ";
	LeaseRow	updated = *row;

	le_store_load_rels();
	if (!IsolationUsesXactSnapshot() && le_rels.fast_path_ok)
	{
		LeInPlace	r = le_store_renew_in_place(name, row, now, expires);

		if (r != LE_IN_PLACE_NOT_ALLOWED)
			return r == LE_IN_PLACE_RENEWED;
	}

	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(row->term);
	v[2] = CStringGetTextDatum(row->holder);
	v[3] = TimestampTzGetDatum(now);
	v[4] = TimestampTzGetDatum(expires);
	le_holder_details(&v[5], &v[6], &v[7], &n[7], &v[8], &n[8]);

	le_spi_begin(&call);
	le_spi_run(STMT_RENEW, v, n, false);
	if (SPI_processed == 0 && !IsolationUsesXactSnapshot())
	{
		/* Under READ COMMITTED the guard saw a newer row: not renewed. */
		le_spi_end(&call);
		return false;
	}
	le_expect_one_row("renewal");
	{
		/* What the cache learns is the row as updated, not as first seen. */
		TupleDesc	desc = SPI_tuptable->tupdesc;
		HeapTuple	tup = SPI_tuptable->vals[0];
		bool		isnull;
		Datum		d;

		d = SPI_getbinval(tup, desc, 1, &isnull);
		updated.owner = DatumGetObjectId(d);
		d = SPI_getbinval(tup, desc, 2, &isnull);
		updated.session_pid = isnull ? 0 : DatumGetInt32(d);
		d = SPI_getbinval(tup, desc, 3, &isnull);
		updated.session_start = isnull ? 0 : DatumGetTimestampTz(d);
	}
	le_spi_end(&call);
	le_store_note_renewal(name, &updated, expires);
	return true;
}

void
le_store_take_over(const char *name, const LeIdentity *who, Oid owner,
				   int64 old_term, int64 new_term, TimestampTz now,
				   TimestampTz expires)
{
	LeSpiCall	call;
	Datum		v[12];
	char		n[13] = "            ";

	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(old_term);
	v[2] = CStringGetTextDatum(who->holder);
	v[3] = Int64GetDatum(new_term);
	v[4] = TimestampTzGetDatum(now);
	v[5] = TimestampTzGetDatum(expires);
	le_session_columns(who, &v[6], &n[6], &v[7], &n[7]);
	le_holder_details(&v[8], &v[9], &v[10], &n[10], &v[11], &n[11]);

	le_spi_begin(&call);
	le_spi_run(STMT_TAKE_OVER, v, n, false);
	le_expect_one_row("takeover");
	le_spi_end(&call);
	le_store_note_grant(name, who, owner, new_term, expires);
}

/*
 * The old term's history row, still open, as committed at this instant:
 * true with its slot filled if there is one (the caller ends it).
 */
static bool
le_history_open_row(Relation history, Relation idx, const char *name,
					int64 term, Snapshot snap, TupleTableSlot *slot)
{
	ScanKeyData keys[2];
	IndexScanDesc scan;
	bool		found;
	bool		isnull;

	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ,
						   PointerGetDatum(cstring_to_text(name)));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT8EQ, Int64GetDatum(term));
	scan = le_index_beginscan(history, idx, snap, 2, 0);
	index_rescan(scan, keys, 2, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	if (!found)
		return false;
	slot_getattr(slot, HCOL_ENDED_AT + 1, &isnull);
	return isnull;
}

/*
 * le_store_take_over_with_history without the executor (direct_write.c):
 * false, and nothing written, unless the transaction runs under READ
 * COMMITTED, history is kept, and both tables have the shape that allows
 * it once locked for writing.  The caller holds the name's writer lock and
 * the lease row's FOR UPDATE lock (le_store_lock_row), so the row found is
 * the one the takeover decided on and no one else can change it.  Does
 * what STMT_TAKE_OVER_WITH_HISTORY does: ends the old term's history row
 * if it is still open, gives the row its new holder and term, and adds the
 * new term's history row.
 */
static bool
le_store_take_over_direct(const char *name, const LeIdentity *who, Oid owner,
						  int64 old_term, int64 new_term, TimestampTz now,
						  TimestampTz expires, bool end_old,
						  TimestampTz ended_at, LeEndReason reason)
{
	LeLookup	lk;
	Relation	history;
	Relation	history_pkey;
	Datum		values[LEASE_NCOLS] = {0};
	bool		nulls[LEASE_NCOLS] = {0};
	bool		replace[LEASE_NCOLS] = {0};
	Datum		hv[HISTORY_NCOLS] = {0};
	bool		hn[HISTORY_NCOLS] = {0};
	char		n[4] = "    ";
	bool		found;
	bool		shouldfree;
	HeapTuple	oldtup;
	HeapTuple	newtup;
	LeOwnerRights rights;

	if (IsolationUsesXactSnapshot() || le_history_max_terms <= 0 ||
		!le_rels.fast_path_ok || !le_rels.history_direct_ok)
		return false;
	found = le_lookup_begin(&lk, name, RowExclusiveLock);
	history = le_store_open(le_rels.history, RowExclusiveLock);
	/* The locks processed DDL committed since: decide on what they cover. */
	le_store_load_rels();
	if (!le_rels.fast_path_ok || !le_rels.history_direct_ok)
	{
		table_close(history, NoLock);
		le_lookup_end(&lk);
		return false;
	}
	if (!found || DatumGetInt64(lk.slot->tts_values[COL_TERM]) != old_term)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access to the lease: %s", "takeover"),
				 errdetail("The lease row changed after this transaction's snapshot was taken."),
				 errhint("Retry the transaction.")));
	history_pkey = index_open(le_rels.history_pkey, RowExclusiveLock);

	/* STMT_TAKE_OVER's SET list. */
	values[COL_HOLDER] = CStringGetTextDatum(who->holder);
	values[COL_TERM] = Int64GetDatum(new_term);
	values[COL_ACQUIRED_AT] = TimestampTzGetDatum(now);
	values[COL_RENEWED_AT] = TimestampTzGetDatum(now);
	values[COL_EXPIRES_AT] = TimestampTzGetDatum(expires);
	le_session_columns(who, &values[COL_SESSION_PID], &n[0],
					   &values[COL_SESSION_START], &n[1]);
	le_holder_details(&values[COL_HOLDER_PID], &values[COL_HOLDER_ROLE],
					  &values[COL_APPLICATION_NAME], &n[2],
					  &values[COL_CLIENT_ADDR], &n[3]);
	nulls[COL_SESSION_PID] = n[0] == 'n';
	nulls[COL_SESSION_START] = n[1] == 'n';
	nulls[COL_APPLICATION_NAME] = n[2] == 'n';
	nulls[COL_CLIENT_ADDR] = n[3] == 'n';
	for (int i = COL_HOLDER; i < LEASE_NCOLS; i++)
		replace[i] = true;

	le_owner_rights_begin(&rights, le_rels.table_owner, le_rels.added_code);

	/* The old term ends, if it had a holder and its row is still open. */
	if (end_old)
	{
		TupleTableSlot *hslot = table_slot_create(history, NULL);

		for (;;)
		{
			Snapshot	snap;
			Datum		ev[HISTORY_NCOLS] = {0};
			bool		en[HISTORY_NCOLS] = {0};
			bool		er[HISTORY_NCOLS] = {0};
			bool		open;
			TM_Result	result = TM_Ok;

			CHECK_FOR_INTERRUPTS();
			snap = RegisterSnapshot(GetLatestSnapshot());
			open = le_history_open_row(history, history_pkey, name, old_term,
									   snap, hslot);
			if (open)
			{
				HeapTuple	htup = ExecFetchSlotHeapTuple(hslot, false, &shouldfree);

				ev[HCOL_ENDED_AT] = TimestampTzGetDatum(ended_at);
				ev[HCOL_END_REASON] = CStringGetTextDatum(le_end_reason_text(reason));
				er[HCOL_ENDED_AT] = er[HCOL_END_REASON] = true;
				result = le_direct_update(history, history_pkey, &htup->t_self,
										  heap_modify_tuple(htup, RelationGetDescr(history),
															ev, en, er));
				if (shouldfree)
					heap_freetuple(htup);
			}
			UnregisterSnapshot(snap);
			if (result == TM_Ok)
				break;

			/*
			 * Changed by someone else meanwhile, or by the statement that
			 * called us (whose changes the next command sees, as SQL would
			 * see them): look at the newest version.
			 */
			if (result == TM_SelfModified)
				CommandCounterIncrement();
		}
		ExecDropSingleTupleTableSlot(hslot);
	}

	/* The lease row: this transaction holds its FOR UPDATE lock. */
	oldtup = ExecFetchSlotHeapTuple(lk.slot, false, &shouldfree);
	newtup = heap_modify_tuple(oldtup, RelationGetDescr(lk.rel),
							   values, nulls, replace);
	if (le_direct_update(lk.rel, lk.idx, &oldtup->t_self, newtup) != TM_Ok)
		elog(ERROR, "lease \"%s\" changed under its row lock", name);
	if (shouldfree)
		heap_freetuple(oldtup);

	/* The new term's history row. */
	hv[HCOL_NAME] = CStringGetTextDatum(name);
	hv[HCOL_TERM] = Int64GetDatum(new_term);
	hv[HCOL_HOLDER] = values[COL_HOLDER];
	hv[HCOL_OWNER] = ObjectIdGetDatum(owner);
	hv[HCOL_SESSION_BOUND] = BoolGetDatum(who->session_bound);
	hv[HCOL_HOLDER_PID] = Int32GetDatum(MyProcPid);
	hv[HCOL_ACQUIRED_AT] = TimestampTzGetDatum(now);
	hn[HCOL_ENDED_AT] = hn[HCOL_END_REASON] = true;
	le_direct_insert(history, history_pkey, hv, hn);

	le_owner_rights_end(&rights);
	index_close(history_pkey, NoLock);
	table_close(history, NoLock);
	le_lookup_end(&lk);

	le_history_trim_in_own_call(name);
	le_store_note_grant(name, who, owner, new_term, expires);
	return true;
}

/*
 * A takeover with its history: the old term ends (if it had a holder) at
 * ended_at for reason, the lease row gets the new term, and the new term's
 * history row is added.  One statement while the tables have their
 * installed shape, else one at a time.
 */
void
le_store_take_over_with_history(const char *name, const LeIdentity *who,
								Oid owner, int64 old_term, int64 new_term,
								TimestampTz now, TimestampTz expires,
								bool end_old, TimestampTz ended_at,
								LeEndReason reason)
{
	LeSpiCall	call;
	Datum		v[18];
	char		n[19] = "                  ";

	le_store_load_rels();
	if (le_store_take_over_direct(name, who, owner, old_term, new_term, now,
								  expires, end_old, ended_at, reason))
		return;
	if (!le_store_takeover_in_one_statement())
	{
		if (end_old)
			le_history_end(name, old_term, ended_at, reason);
		le_store_take_over(name, who, owner, old_term, new_term, now, expires);
		le_history_begin(name, new_term, who, owner, now);
		return;
	}
	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(old_term);
	v[2] = CStringGetTextDatum(who->holder);
	v[3] = Int64GetDatum(new_term);
	v[4] = TimestampTzGetDatum(now);
	v[5] = TimestampTzGetDatum(expires);
	le_session_columns(who, &v[6], &n[6], &v[7], &n[7]);
	le_holder_details(&v[8], &v[9], &v[10], &n[10], &v[11], &n[11]);
	v[12] = TimestampTzGetDatum(ended_at);
	v[13] = CStringGetTextDatum(le_end_reason_text(reason));
	v[14] = BoolGetDatum(end_old);
	v[15] = ObjectIdGetDatum(owner);
	v[16] = BoolGetDatum(who->session_bound);
	v[17] = Int32GetDatum(MyProcPid);

	le_spi_begin(&call);
	le_spi_run(STMT_TAKE_OVER_WITH_HISTORY, v, n, false);
	le_expect_one_row("takeover");
	le_history_trim(name);
	le_spi_end(&call);
	le_store_note_grant(name, who, owner, new_term, expires);
}

void
le_store_release(const char *name, const LeaseRow *row, TimestampTz now)
{
	LeSpiCall	call;
	Datum		v[3];
	LeaseRow	released = *row;
	int64		term = row->term;

	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(term);
	v[2] = TimestampTzGetDatum(now);

	le_spi_begin(&call);
	le_spi_run(STMT_RELEASE, v, NULL, false);
	le_expect_one_row("release");
	{
		/*
		 * The owner as updated: an administrator's change of it may have
		 * committed after `row` was read (the UPDATE then acted on it).
		 */
		bool		isnull;

		released.owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
														 SPI_tuptable->tupdesc,
														 1, &isnull));
	}
	le_spi_end(&call);

	released.holder = NULL;
	released.expires_at = now;
	released.session_pid = 0;
	released.session_start = 0;
	le_cache_note_write(le_rels.leases, name, &released);
}

/*
 * le_store_lock_row without the executor, under READ COMMITTED while the
 * table has its installed shape: the row's version committed at this
 * instant, locked as SELECT ... FOR UPDATE (or FOR KEY SHARE) SKIP LOCKED
 * locks it; true with the outcome set.  False, nothing locked, when the
 * executor must do it: another isolation level, another shape, or a row
 * changed between the lookup and the lock (the executor then follows it to
 * its newest version).
 */
static bool
le_store_lock_row_direct(const char *name, bool for_takeover,
						 LeRowLock *outcome, LeaseRow *locked)
{
	LeLookup	lk;
	bool		found;
	TM_FailureData tmfd;
	TM_Result	result;
	ItemPointerData tid;

	le_store_load_rels();
	if (IsolationUsesXactSnapshot() || !le_rels.fast_path_ok)
		return false;
	found = le_lookup_begin(&lk, name, RowShareLock);
	le_store_load_rels();
	if (!le_rels.fast_path_ok)
	{
		le_lookup_end(&lk);
		return false;
	}
	if (!found)
	{
		le_lookup_end(&lk);
		*outcome = LE_ROW_ABSENT;
		return true;
	}
	tid = lk.slot->tts_tid;

	/*
	 * LOCK_UPDATE_IN_PROGRESS, as the executor's row locks: a version being
	 * written by a transaction still in progress (a renewal, a release, a
	 * move, an administrator's UPDATE) is locked too, and the lock follows
	 * it to the new version if that commits.  Without it a fence taken
	 * then would cover only the old version, and a takeover of the new one
	 * would not wait for the fenced transaction.
	 */
	result = table_tuple_lock(lk.rel, &tid, lk.snap, lk.slot,
							  GetCurrentCommandId(true),
							  for_takeover ? LockTupleExclusive : LockTupleKeyShare,
							  LockWaitSkip, TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS,
							  &tmfd);
	if (result == TM_Ok && locked != NULL)
	{
		/*
		 * Only takeovers ask for the row, and a FOR UPDATE lock is not
		 * granted on a version another transaction is replacing: the
		 * version locked is the latest, the lookup's.
		 */
		slot_getallattrs(lk.slot);
		le_row_from_datums(lk.slot->tts_values, lk.slot->tts_isnull, locked);
	}
	le_lookup_end(&lk);
	if (result == TM_Ok)
		*outcome = LE_ROW_LOCKED;
	else if (result == TM_WouldBlock)
		*outcome = LE_ROW_BUSY;
	else
		return false;
	return true;
}

/*
 * Lock the lease row without waiting.
 *
 * for_takeover: FOR UPDATE, which conflicts with the FOR KEY SHARE lock of
 * a fenced transaction (assert_leader), so a takeover never slips under a
 * fenced write.  Otherwise FOR KEY SHARE, the fence itself, which does not
 * conflict with renewals and releases (FOR NO KEY UPDATE).
 *
 * The lock covers the row's latest version, but under REPEATABLE READ the
 * values the query returns may be its snapshot's older version, so that
 * version is read again with le_store_read() into *locked (if not NULL)
 * when the row is locked.  A row created after
 * that snapshot cannot be locked through it at all: that is a serialization
 * failure (40001), not "locked by someone else".
 */
LeRowLock
le_store_lock_row(const char *name, bool for_takeover, LeaseRow *locked)
{
	LeSpiCall	call;
	Datum		v[1];
	LeaseRow	latest;
	bool		visible;
	LeRowLock	outcome;

	if (le_store_lock_row_direct(name, for_takeover, &outcome, locked))
		return outcome;
	v[0] = CStringGetTextDatum(name);
	le_spi_begin(&call);
	le_spi_run(for_takeover ? STMT_LOCK_FOR_TAKEOVER : STMT_LOCK_FOR_FENCE,
			   v, NULL, false);
	if (SPI_processed == 1)
	{
		le_spi_end(&call);
		if (locked != NULL)
			le_store_read(name, locked);
		return LE_ROW_LOCKED;
	}
	if (IsolationUsesXactSnapshot())
		le_spi_run(STMT_VISIBLE_TO_SNAPSHOT, v, NULL, true);
	visible = !IsolationUsesXactSnapshot() || SPI_processed == 1;
	le_spi_end(&call);

	le_store_read(name, &latest);
	if (!latest.found)
		return LE_ROW_ABSENT;
	if (!visible)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access to lease \"%s\"", name),
				 errdetail("The lease row was created after this transaction's snapshot was taken."),
				 errhint("Retry the transaction.")));
	return LE_ROW_BUSY;
}

/*
 * How many names the role owns, as committed at this instant: a scan of the
 * table under the latest snapshot (not the transaction's, which REPEATABLE
 * READ would freeze).  lease.c calls it only while
 * leader_election.max_names_per_role is set, holding the role's name-count
 * lock, so no other first use by the role can commit meanwhile.  There is
 * no index on owner on purpose: renewals would have to keep it, and one
 * renewal that cannot be HOT (a snapshot held for a few milliseconds
 * suffices) would then leave the table and its indexes above the 64 kB of
 * benchmark T7.  The scan costs a first use of a new name some
 * milliseconds per 100,000 names, and only while the setting is on.
 */
int64
le_store_count_names(Oid owner)
{
	Relation	rel;
	Snapshot	snap;
	TableScanDesc scan;
	TupleTableSlot *slot;
	int64		count = 0;

	le_store_load_rels();
	rel = le_store_open(le_rels.leases, AccessShareLock);
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	scan = table_beginscan(rel, snap, 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d = slot_getattr(slot, COL_OWNER + 1, &isnull);

		if (!isnull && DatumGetObjectId(d) == owner)
			count++;
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	return count;
}

/*
 * The term counter's storage (the rules are in terms.c): the sequence
 * leader_election.terms and the table leader_election.term_era.
 */

/* Does this database still have the 1.0 objects (before ALTER EXTENSION UPDATE)? */
bool
le_store_schema_1_0(void)
{
	le_store_load_rels();
	return le_rels.schema_1_0;
}

/* leader_election.terms itself: a new one means a new counter (DROP EXTENSION). */
Oid
le_store_terms_relid(void)
{
	le_store_load_rels();
	return le_rels.terms_seq;
}

/*
 * The counter must hand out every value from the sequence itself, in
 * increasing order, once: with a CACHE above 1 each backend draws from a
 * block of its own, below values other backends have already handed out
 * (and a move, setval, leaves those blocks behind it); a negative INCREMENT
 * goes down, and CYCLE starts again.  Checked before the draw and after it
 * (nextval's lock on the sequence has then taken in any ALTER SEQUENCE that
 * committed, and keeps a new one out until this transaction ends).  55000.
 */
static void
le_require_plain_terms(Oid seq)
{
	HeapTuple	tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seq));
	Form_pg_sequence form;
	int64		cache;
	int64		increment;
	bool		cycle;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for sequence %u", seq);
	form = (Form_pg_sequence) GETSTRUCT(tup);
	cache = form->seqcache;
	increment = form->seqincrement;
	cycle = form->seqcycle;
	ReleaseSysCache(tup);
	if (cache != 1 || increment <= 0 || cycle)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the term counter leader_election.terms must count up by itself, without CACHE or CYCLE"),
				 errdetail("It has CACHE %lld, INCREMENT %lld, %s: terms drawn from it would not follow the order in which they are handed out, or would repeat.",
						   (long long) cache, (long long) increment,
						   cycle ? "CYCLE" : "NO CYCLE"),
				 errhint("ALTER SEQUENCE leader_election.terms CACHE 1 INCREMENT BY 1 NO CYCLE;")));
}

/*
 * The counter's next value (nextval, as the caller: no privilege check).
 * Drawn holding the movers' lock in share mode, only around the nextval: a
 * move reads the counter and then sets it, and a value drawn in between
 * would be handed out again after the set.
 */
int64
le_store_terms_next(void)
{
	LOCKTAG		tag;
	volatile int64 term = 0;

	le_store_load_rels();
	le_require_plain_terms(le_rels.terms_seq);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, LE_LOCKTAG_TERMS);
	(void) LockAcquire(&tag, ShareLock, true, false);
	PG_TRY();
	{
		term = nextval_internal(le_rels.terms_seq, false);
		le_require_plain_terms(le_rels.terms_seq);
	}
	PG_FINALLY();
	{
		LockRelease(&tag, ShareLock, true);
	}
	PG_END_TRY();
	return term;
}

/*
 * Move the counter forward to at least at_least.  Only ever forward, one
 * mover at a time, and no value drawn while it moves (le_store_terms_next),
 * so neither two moves nor a move and a draw can undo each other.  setval
 * takes effect at once, whatever becomes of the transaction, so the lock is
 * held only around it: nobody waits behind the mover's transaction.
 */
void
le_store_advance_terms(int64 at_least)
{
	LeSpiCall	call;
	LOCKTAG		tag;
	Datum		v[1];

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, LE_LOCKTAG_TERMS);
	(void) LockAcquire(&tag, ExclusiveLock, true, false);
	PG_TRY();
	{
		v[0] = Int64GetDatum(at_least);
		le_spi_begin(&call);
		le_spi_run(STMT_ADVANCE_TERMS, v, NULL, false);
		le_spi_end(&call);
	}
	PG_FINALLY();
	{
		LockRelease(&tag, ExclusiveLock, true);
	}
	PG_END_TRY();
}

/*
 * What leader_election.term_era says about this server's era, read without
 * a lock (committed rows and this transaction's own).  Each row records a
 * server and timeline and the first term of an era it drew from; only the
 * rows with the highest first_term matter (older ones are cleaned up by
 * le_store_record_term_era).  *first_term is that highest first_term (0 if
 * there are no rows).  Returns whether those rows all name (sysid, tli)
 * and the counter is not below them: the era is this server's.  Otherwise
 * *foreign says whether one of them names another system identifier, or
 * the counter was set back below them (a restore brought it from another
 * server), or there are none; *rec_tli is the lowest timeline among those
 * naming this one.
 */
bool
le_store_term_era_read(uint64 sysid, TimeLineID tli, int64 *first_term,
					   bool *foreign, TimeLineID *rec_tli)
{
	LeSpiCall	call;
	bool		same = true;
	bool		other_sysid = false;
	bool		any = false;
	TimeLineID	lowest = 0;

	*first_term = 0;
	le_spi_begin(&call);
	if (SPI_execute("SELECT e.system_identifier, e.timeline, e.first_term, "
					"e.first_term OPERATOR(pg_catalog.>) t.last_value "
					"FROM leader_election.term_era AS e, leader_election.terms AS t "
					"WHERE e.first_term OPERATOR(pg_catalog.=) "
					"(SELECT pg_catalog.max(first_term) FROM leader_election.term_era)",
					false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read leader_election.term_era");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull[4];
		Datum		d1 = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull[0]);
		Datum		d2 = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull[1]);
		Datum		d3 = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull[2]);
		Datum		d4 = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4, &isnull[3]);
		uint64		row_sysid = isnull[0] ? 0 : (uint64) DatumGetInt64(d1);
		TimeLineID	row_tli = isnull[1] ? 0 : (TimeLineID) DatumGetInt32(d2);
		bool		counter_below = !isnull[3] && DatumGetBool(d4);

		any = true;
		if (!isnull[2])
			*first_term = DatumGetInt64(d3);
		if (row_sysid != sysid || row_tli != tli)
			same = false;
		/* A counter below the record was set back: another server's. */
		if (row_sysid != sysid || counter_below)
			other_sysid = true;
		else if (lowest == 0 || row_tli < lowest)
			lowest = row_tli;
	}
	le_spi_end(&call);
	if (foreign)
		*foreign = other_sysid || !any;
	if (rec_tli)
		*rec_tli = lowest;
	return any && same && !other_sysid;
}

/*
 * Record in leader_election.term_era that (sysid, tli) draws from the era
 * beginning at first_term: a row of its own, inserted (so no grant waits
 * for another's record, and each transaction that commits a term of a new
 * era commits its record with it), then the rows of earlier eras that
 * nobody holds are removed.
 */
void
le_store_record_term_era(uint64 sysid, TimeLineID tli, int64 first_term)
{
	LeSpiCall	call;
	Datum		args[3];
	Oid			types[3] = {INT8OID, INT4OID, INT8OID};

	args[0] = Int64GetDatum((int64) sysid);
	args[1] = Int32GetDatum((int32) tli);
	args[2] = Int64GetDatum(first_term);
	le_spi_begin(&call);
	if (SPI_execute_with_args("INSERT INTO leader_election.term_era "
							  "(system_identifier, timeline, first_term) VALUES ($1, $2, $3)",
							  3, types, args, NULL, false, 0) != SPI_OK_INSERT ||
		SPI_execute_with_args("DELETE FROM leader_election.term_era WHERE ctid OPERATOR(pg_catalog.=) ANY "
							  "(SELECT e.ctid FROM leader_election.term_era AS e "
							  " WHERE e.first_term OPERATOR(pg_catalog.<) $3 FOR UPDATE SKIP LOCKED)",
							  3, types, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not record the term era");
	le_spi_end(&call);
}

/*
 * How many history rows the name had when a grant last looked
 * (le_store_history_max_term, under the name's writer lock), so that the
 * grant's le_history_begin can skip the trim while the name is below
 * history_max_terms: a grant needs one query on the history, not two.  A
 * count made stale by a direct change of the table only delays a trim to
 * the name's next grant (the trim keeps the newest terms, however many
 * there are).
 */
static char le_history_counted_name[LE_MAX_NAME_BYTES + 1];
static int64 le_history_counted = -1;

/*
 * The highest term in the name's history (*max_term) and how many rows it
 * has (*count, counted up to history_max_terms + 1), as committed at this
 * instant, read from the (name, term) index: a grant's one look at the
 * history costs one index descent rather than a query.  False if there is
 * no such index once history is locked (DDL the lock waited for may have
 * dropped it): then the caller asks with SQL.
 */
static bool
le_store_history_max_term_by_index(const char *name, int64 *max_term,
								   int64 *count)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snap;
	TupleTableSlot *slot;
	AttrNumber	term_att;
	ScanKeyData key;
	IndexScanDesc scan;

	if (!OidIsValid(le_rels.history))
		return false;
	rel = le_store_open(le_rels.history, AccessShareLock);
	if (!OidIsValid(le_rels.history_pkey))
	{
		table_close(rel, NoLock);
		return false;
	}
	idx = index_open(le_rels.history_pkey, AccessShareLock);
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	term_att = idx->rd_index->indkey.values[1];
	*max_term = 0;
	*count = 0;
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ,
						   PointerGetDatum(cstring_to_text(name)));
	scan = le_index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	while (*count <= le_history_max_terms &&
		   index_getnext_slot(scan, BackwardScanDirection, slot))
	{
		if (*count == 0)
		{
			bool		isnull;
			Datum		d = slot_getattr(slot, term_att, &isnull);

			*max_term = isnull ? 0 : DatumGetInt64(d);
		}
		(*count)++;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
	return true;
}

/* The highest term in the name's history, or 0. */
int64
le_store_history_max_term(const char *name)
{
	LeSpiCall	call;
	Datum		v[1];
	bool		isnull;
	Datum		d;
	int64		max_term;

	le_store_load_rels();
	strlcpy(le_history_counted_name, name, sizeof(le_history_counted_name));
	if (le_store_history_max_term_by_index(name, &max_term, &le_history_counted))
		return max_term;

	v[0] = CStringGetTextDatum(name);
	le_spi_begin(&call);
	le_spi_run(STMT_HISTORY_MAX, v, NULL, true);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	max_term = isnull ? 0 : DatumGetInt64(d);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	le_history_counted = isnull ? -1 : DatumGetInt64(d);
	strlcpy(le_history_counted_name, name, sizeof(le_history_counted_name));
	le_spi_end(&call);
	return max_term;
}

/*
 * The secret that keys the names' writer locks (lease.c): 32 random bytes in
 * leader_election.lock_key, which no ordinary role can read, made when the
 * extension is created (not dumped: a restored database has its own).  Read
 * once per backend and kept: a trigger refuses every change of the key.
 */
void
le_store_lock_key(uint8 *key)
{
	le_store_load_rels();
	if (le_rels.schema_1_0)
	{
		memset(key, 0, LE_LOCK_KEY_BYTES);
		return;
	}
	if (!le_rels.lock_key_loaded)
	{
		/*
		 * Read under the latest snapshot, not the statement's: a statement
		 * that began before ALTER EXTENSION UPDATE committed sees the
		 * table in the catalogs (they are read fresh) but, with its own
		 * snapshot, not the row the update put in it.  The key is the
		 * extension's configuration, the same for every transaction.
		 */
		Relation	rel = le_store_open(le_rels.lock_key_rel, AccessShareLock);
		AttrNumber	keyatt = get_attnum(le_rels.lock_key_rel, "key");
		Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
		TableScanDesc scan = table_beginscan(rel, snap, 0, NULL);
		HeapTuple	tup;
		int			rows = 0;
		bool		ok = false;

		while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
		{
			bool		isnull;
			Datum		d;

			if (++rows > 1 || keyatt == InvalidAttrNumber)
				break;
			d = heap_getattr(tup, keyatt, RelationGetDescr(rel), &isnull);
			if (!isnull)
			{
				bytea	   *k = DatumGetByteaPP(d);

				ok = VARSIZE_ANY_EXHDR(k) == LE_LOCK_KEY_BYTES;
				if (ok)
					memcpy(le_rels.lock_key, VARDATA_ANY(k), LE_LOCK_KEY_BYTES);
			}
		}
		table_endscan(scan);
		UnregisterSnapshot(snap);
		table_close(rel, AccessShareLock);
		if (!ok || rows != 1)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("leader_election.lock_key must hold exactly one key of %d bytes",
							LE_LOCK_KEY_BYTES),
					 errhint("Put back the row that was removed; or insert one from leader_election.new_lock_key() and then end every session of this database.")));
		le_rels.lock_key_loaded = true;
	}
	memcpy(key, le_rels.lock_key, LE_LOCK_KEY_BYTES);
}

/* leader_election.new_lock_key(): 32 bytes from the strong random source. */
PG_FUNCTION_INFO_V1(le_new_lock_key);
Datum
le_new_lock_key(PG_FUNCTION_ARGS)
{
	bytea	   *k = palloc(VARHDRSZ + LE_LOCK_KEY_BYTES);

	SET_VARSIZE(k, VARHDRSZ + LE_LOCK_KEY_BYTES);
	if (!pg_strong_random(VARDATA(k), LE_LOCK_KEY_BYTES))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random lock key")));
	PG_RETURN_BYTEA_P(k);
}

/*
 * Inside an SPI call that just added a term to the name's history: keep at
 * most history_max_terms terms, unless the grant's look at the history
 * (le_store_history_max_term) showed the name below the limit.
 */
/*
 * Could the name have more than history_max_terms rows once this grant's
 * is added?  Known without a query when the grant counted them (the
 * history's highest term, read by index, counts up to the limit).
 */
static bool
le_history_needs_trim(const char *name)
{
	return le_history_counted < 0 || strcmp(le_history_counted_name, name) != 0 ||
		le_history_counted + 1 > le_history_max_terms;
}

static void
le_history_trim(const char *name)
{
	Datum		trim[2];

	if (le_history_needs_trim(name))
	{
		trim[0] = CStringGetTextDatum(name);
		trim[1] = Int64GetDatum((int64) le_history_max_terms);
		le_spi_run(STMT_HISTORY_TRIM, trim, NULL, false);
	}
	le_history_counted = -1;
}

/* le_history_trim outside any SPI call of this file: connects if it must. */
static void
le_history_trim_in_own_call(const char *name)
{
	LeSpiCall	call;

	if (!le_history_needs_trim(name))
	{
		le_history_counted = -1;
		return;
	}
	le_spi_begin(&call);
	le_history_trim(name);
	le_spi_end(&call);
}

/* Record the start of a term, keeping at most history_max_terms per name. */
void
le_history_begin(const char *name, int64 term, const LeIdentity *who,
				 Oid owner, TimestampTz at)
{
	LeSpiCall	call;
	Datum		v[7];

	if (le_history_max_terms <= 0)
		return;
	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(term);
	v[2] = CStringGetTextDatum(who->holder);
	v[3] = ObjectIdGetDatum(owner);
	v[4] = BoolGetDatum(who->session_bound);
	v[5] = Int32GetDatum(MyProcPid);
	v[6] = TimestampTzGetDatum(at);

	le_spi_begin(&call);
	le_spi_run(STMT_HISTORY_BEGIN, v, NULL, false);
	le_history_trim(name);
	le_spi_end(&call);
}

void
le_history_end(const char *name, int64 term, TimestampTz at,
			   LeEndReason reason)
{
	LeSpiCall	call;
	Datum		v[4];

	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(term);
	v[2] = TimestampTzGetDatum(at);
	v[3] = CStringGetTextDatum(le_end_reason_text(reason));

	le_spi_begin(&call);
	le_spi_run(STMT_HISTORY_END, v, NULL, false);
	le_spi_end(&call);
}

/*
 * The leaders' published info (leader_info.c decides; the caller holds the
 * name's writer lock).  Before the 1.1 update there is no table: 55000.
 */
static void
le_store_require_issue_15(void)
{
	le_store_load_rels();
	if (!le_rels.has_issue_15)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the leader_election objects in this database are older than the library"),
				 errhint("Run ALTER EXTENSION leader_election UPDATE;")));
}

/*
 * Set the info (a jsonb) of term `term` of name, begun at acquired_at, or
 * clear it.
 */
void
le_store_set_info(const char *name, int64 term, TimestampTz acquired_at,
				  Datum info, bool clear, TimestampTz now)
{
	LeSpiCall	call;
	Datum		v[5];

	le_store_require_issue_15();
	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(term);
	v[2] = info;
	v[3] = TimestampTzGetDatum(now);
	v[4] = TimestampTzGetDatum(acquired_at);
	le_spi_begin(&call);
	le_spi_run(clear ? STMT_INFO_CLEAR : STMT_INFO_SET, v, NULL, false);
	le_spi_end(&call);
}

/*
 * The info published in term `term` of name, begun at acquired_at, as
 * committed at this instant, as text, or NULL; NULL too before the 1.1
 * update.
 */
char *
le_store_read_info(const char *name, int64 term, TimestampTz acquired_at)
{
	LeSpiCall	call;
	Datum		v[3];
	char	   *info = NULL;

	le_store_load_rels();
	if (!le_rels.has_issue_15)
		return NULL;
	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(term);
	v[2] = TimestampTzGetDatum(acquired_at);
	le_spi_begin(&call);
	le_spi_read_fresh(STMT_INFO_READ, v, NULL);
	if (SPI_processed == 1)
	{
		char	   *text = SPI_getvalue(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1);

		if (text != NULL)
			info = MemoryContextStrdup(call.caller_cxt, text);
	}
	le_spi_end(&call);
	return info;
}

/* Record the reservation of a hand-over or move (handover.c decides). */
void
le_store_set_handover(const char *name, const LeHandover *h)
{
	LeSpiCall	call;
	Datum		v[7];
	char		n[8] = "       ";

	le_store_require_issue_15();
	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(h->term);
	v[2] = CStringGetTextDatum(h->previous_holder);
	if (h->successor != NULL)
		v[3] = CStringGetTextDatum(h->successor);
	else
	{
		v[3] = (Datum) 0;
		n[3] = 'n';
	}
	v[4] = CStringGetTextDatum(h->moved ? "moved" : "handed_over");
	v[5] = TimestampTzGetDatum(h->reserved_until);
	v[6] = TimestampTzGetDatum(h->ended_at);
	le_spi_begin(&call);
	le_spi_run(STMT_HANDOVER_SET, v, n, false);
	le_spi_end(&call);
}

/*
 * Move the end of the reservation of term `term` of name, made when it ended
 * at ended_at, to reserved_until; nothing if that reservation is gone, or
 * the table is (the extension was dropped in the same transaction).
 */
void
le_store_restamp_handover(const char *name, int64 term, TimestampTz ended_at,
						  TimestampTz reserved_until)
{
	LeSpiCall	call;
	Datum		v[4];
	Oid			nsp = get_namespace_oid("leader_election", true);
	bool		pushed;
	bool		was_read_only;

	if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("handovers", nsp)))
		return;
	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(term);
	v[2] = TimestampTzGetDatum(ended_at);
	v[3] = TimestampTzGetDatum(reserved_until);
	/* At PRE_COMMIT no statement is running: give SPI a snapshot. */
	pushed = !ActiveSnapshotSet();
	if (pushed)
		PushActiveSnapshot(GetTransactionSnapshot());

	/*
	 * SET transaction_read_only after the hand-over stops the user's later
	 * writes, not the completion of this one (a plain release needs no
	 * write at commit and commits too).  Not while code an administrator
	 * added to the tables would run inside the UPDATE and could write
	 * elsewhere: then the commit fails (25006), as that code would.
	 */
	le_store_load_rels();
	was_read_only = XactReadOnly;
	if (!le_rels.added_code)
		XactReadOnly = false;
	PG_TRY();
	{
		le_spi_begin(&call);
		le_spi_run(STMT_HANDOVER_RESTAMP, v, NULL, false);
		le_spi_end(&call);
	}
	PG_FINALLY();
	{
		XactReadOnly = was_read_only;
	}
	PG_END_TRY();
	if (pushed)
		PopActiveSnapshot();
}

/*
 * The reservation made when term `term` of name ended at ended_at (the
 * expiry the end gave the lease), as committed at this instant; false if
 * there is none (or no table before the 1.1 update).
 */
bool
le_store_read_handover(const char *name, int64 term, TimestampTz ended_at,
					   LeHandover *h)
{
	LeSpiCall	call;
	Datum		v[3];
	bool		found = false;

	le_store_load_rels();
	if (!le_rels.has_issue_15)
		return false;
	/* Wait for DDL here, not in the SPI statement's parser (le_store_open). */
	table_close(le_store_open(le_rels.handovers, AccessShareLock), NoLock);
	if (!le_rels.has_issue_15)
		return false;
	v[0] = CStringGetTextDatum(name);
	v[1] = Int64GetDatum(term);
	v[2] = TimestampTzGetDatum(ended_at);
	le_spi_begin(&call);
	le_spi_read_fresh(STMT_HANDOVER_READ, v, NULL);
	if (SPI_processed == 1)
	{
		TupleDesc	desc = SPI_tuptable->tupdesc;
		HeapTuple	tup = SPI_tuptable->vals[0];
		MemoryContext old = MemoryContextSwitchTo(call.caller_cxt);
		char	   *reason = SPI_getvalue(tup, desc, 3);
		bool		isnull;

		h->term = term;
		h->ended_at = ended_at;
		h->previous_holder = SPI_getvalue(tup, desc, 1);
		h->successor = SPI_getvalue(tup, desc, 2);
		h->moved = reason != NULL && strcmp(reason, "moved") == 0;
		h->reserved_until = DatumGetTimestampTz(SPI_getbinval(tup, desc, 4, &isnull));
		MemoryContextSwitchTo(old);
		found = true;
	}
	le_spi_end(&call);
	return found;
}
