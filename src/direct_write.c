/*-------------------------------------------------------------------------
 *
 * direct_write.c
 *	  Inserting or updating a row without the executor, keeping what the
 *	  executor keeps.
 *
 * A grant of a new name inserts two rows (the lease and its term's history
 * row); a takeover updates two (the lease, the old term's history row) and
 * inserts one.  Through SPI, most of their CPU went to starting the
 * executor for them: building the plan state of the statement and its
 * CTEs, opening the indexes.  Under a storm of grants that cost is what
 * stands between a grant and the speed of an ordinary one-row write
 * (bench/grants.sh, T8 and T10).
 *
 * le_direct_insert() does what the executor's INSERT does for a table of
 * the shape le_direct_insert_allowed() accepts, and nothing else:
 *
 *	  - NOT NULL: every column marked NOT NULL, whoever marked it, is
 *		checked (23502), before anything is written;
 *	  - CHECK: every CHECK constraint of the table, whoever added it, is
 *		evaluated on the new row (23514), planned on every call as the
 *		executor plans it, except those that planning again could not
 *		change (le_planned_check: keeping any plan across calls went stale
 *		and was freed under a running check);
 *	  - the heap tuple (heap_insert: WAL, statistics, SERIALIZABLE's
 *		conflict checks) and the entry of the table's only index, with the
 *		unique check (23505, waiting for an in-progress conflicting insert
 *		as the executor does).
 *
 * le_direct_update() does the same for an UPDATE of one row the caller
 * found: the replica identity a publication of updates needs (55000, as
 * UPDATE checks it), NOT NULL and CHECK on the new version, heap_update
 * (which waits for a concurrent writer of the row, as UPDATE does), and an
 * index entry for the new version unless the update was HOT.  The caller
 * decides, as UPDATE's WHERE clause would, on the version it found; when
 * that version was changed meanwhile it is told so (TM_Updated,
 * TM_Deleted, TM_SelfModified) and looks again, as UPDATE under READ
 * COMMITTED re-checks the newest version.
 *
 * WHERE AN INSERTED ROW GOES
 *
 * heap_insert asks the free space map for a page when the backend has no
 * page of its own for the table yet, and the map hands concurrent askers
 * different pages on purpose.  A storm of takeovers is 250 fresh backends
 * inserting one history row each: they landed on some 90 pages, and each
 * page's first change after a checkpoint is logged whole (720 kB of full
 * page images in a storm that otherwise writes 150 kB of WAL).  So a
 * backend without a page of its own for the table (its first insert there,
 * or after its relation cache entry was rebuilt) is offered the page the
 * last direct insert into the same table used, whichever backend made it
 * (le_insert_hints, a hint per table in shared memory): heap_insert takes
 * it if the row fits there under the table's fillfactor, and otherwise
 * asks the map as before, so free space is still reused.  A backend that
 * has a page keeps inserting there, as heap_insert does: busy clients
 * granting new names then do not all queue for one page's lock.  A hint
 * is only a guess: it is checked against the table's current length (a
 * table cannot shrink while the inserter holds its RowExclusiveLock), and
 * a hint left by another table or database that shares its slot costs
 * locality, nothing else.
 *
 * What it does not do is why le_direct_insert_allowed() exists: other
 * indexes, triggers, rules, row-level security that applies to the
 * writer, column defaults, identity and generated columns, type
 * modifiers, partitions (either side) and other table access methods send
 * the caller back to SQL, which keeps all of them.  Unlike the executor's,
 * its constraint errors carry no "Failing row contains" detail.  The caller
 * opens the relations with RowExclusiveLock and asks again after locking
 * (DDL committed in between is seen only then), and makes sure the row's
 * values have the table's column types.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_publication.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "nodes/readfuncs.h"
#include "optimizer/optimizer.h"
#include "storage/bufmgr.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "compat.h"
#include "leader_election.h"

/* 23502 for a NULL in a NOT NULL column, as the executor reports it. */
static void
le_check_not_null(Relation rel, const bool *nulls)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attnotnull && !att->attisdropped && nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
							NameStr(att->attname), RelationGetRelationName(rel)),
					 errtablecol(rel, i + 1)));
	}
}

/*
 * Planned CHECK expressions kept across calls, because planning one on
 * every call was most of a takeover's cost of ending its old term (the
 * installed history_end_reason folds its ARRAY constant each time).
 * Kept only when planning again could not give anything else, which is
 * when planning evaluated and inlined nothing (le_check_not_keepable):
 * every node is of a type that calls no function planning would hide
 * (not GREATEST, a subscript, a row comparison, a domain, a subquery, a
 * parameter, ...); every function it calls is one of PostgreSQL's own
 * (OID below FirstGenbkiObjectId) written in C or internal (so not
 * inlined); and every call has a column among its arguments (so it is not
 * folded into a constant: an immutable function's result may still
 * depend on settings, text search configurations or a replaced
 * definition).  What planning may still fold is then only constant
 * structure (an ARRAY of literals), which nothing can change.  Anything
 * else is planned on every call, as the executor does.
 *
 * Entries are found by the constraint's stored text (ccbin), compared in
 * full on every call, so a constraint added, dropped or changed is never
 * answered from an older entry.  They are never freed (an evaluation in
 * progress may point into one), so the table only fills; once full, new
 * texts are planned per call.
 */
#define LE_KEPT_CHECKS 16

typedef struct LeKeptCheck
{
	char	   *ccbin;
	Expr	   *planned;
} LeKeptCheck;

static LeKeptCheck le_kept_checks[LE_KEPT_CHECKS];
static int	le_kept_check_count = 0;

/* check_functions_in_node: does the node call a function at all? */
static bool
le_any_function(Oid func_id, void *context)
{
	return true;
}

/* May a plan that calls this function be kept?  (check_functions_in_node) */
static bool
le_function_not_keepable(Oid func_id, void *context)
{
	HeapTuple	tup;
	bool		not_keepable = true;

	if (func_id >= FirstGenbkiObjectId)
		return true;
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(func_id));
	if (HeapTupleIsValid(tup))
	{
		Oid			lang = ((Form_pg_proc) GETSTRUCT(tup))->prolang;

		not_keepable = lang != INTERNALlanguageId && lang != ClanguageId;
		ReleaseSysCache(tup);
	}
	return not_keepable;
}

/*
 * Does the stored expression have anything planning could evaluate or
 * inline?  Only the node types listed are looked into; any other (a
 * domain, a subquery, GREATEST, a subscript, a row comparison, ...) may
 * call a function planning does not show, so it is not kept.
 */
static bool
le_check_not_keepable(Node *node, void *context)
{
	if (node == NULL)
		return false;
	switch (nodeTag(node))
	{
		case T_Var:
		case T_Const:
		case T_List:
		case T_FuncExpr:
		case T_OpExpr:
		case T_DistinctExpr:
		case T_NullIfExpr:
		case T_ScalarArrayOpExpr:
		case T_BoolExpr:
		case T_NullTest:
		case T_BooleanTest:
		case T_RelabelType:
		case T_CoerceViaIO:
		case T_ArrayExpr:
			break;
		default:
			return true;
	}
	if (check_functions_in_node(node, le_function_not_keepable, NULL))
		return true;
	/* A call of constants only would be folded at planning. */
	if (check_functions_in_node(node, le_any_function, NULL) &&
		!contain_var_clause(node))
		return true;
	return expression_tree_walker(node, le_check_not_keepable, context);
}

/* The planned expression of a CHECK constraint's stored text. */
static Expr *
le_planned_check(const char *ccbin)
{
	Node	   *stored;
	Expr	   *planned;
	MemoryContext old;

	for (int i = 0; i < le_kept_check_count; i++)
		if (strcmp(le_kept_checks[i].ccbin, ccbin) == 0)
			return le_kept_checks[i].planned;
	stored = stringToNode(ccbin);
	if (le_kept_check_count == LE_KEPT_CHECKS ||
		le_check_not_keepable(stored, NULL))
		return expression_planner((Expr *) stored);
	planned = expression_planner((Expr *) stored);
	old = MemoryContextSwitchTo(TopMemoryContext);
	le_kept_checks[le_kept_check_count].ccbin = pstrdup(ccbin);
	le_kept_checks[le_kept_check_count].planned = copyObject(planned);
	MemoryContextSwitchTo(old);
	return le_kept_checks[le_kept_check_count++].planned;
}

static pg_atomic_uint64 *le_insert_hint(Relation rel);

/*
 * Do now what le_direct_update's and le_direct_insert's first calls in
 * this backend would do for rel (a waiter, before it sleeps, for the
 * takeover it may make): plan the CHECK constraints that can be kept,
 * build the relation's description of the publications it is in (which
 * the replica identity check reads; the relcache keeps it until an
 * invalidation), and read rel's insert hint, so that the page of shared
 * memory it is on is mapped into this backend already.
 */
void
le_direct_prepare(Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	int			n = constr == NULL ? 0 : constr->num_check;
	char	  **texts = palloc(sizeof(char *) * Max(n, 1));
	PublicationDesc pubdesc;
	pg_atomic_uint64 *hint = le_insert_hint(rel);

	RelationBuildPublicationDesc(rel, &pubdesc);
	if (hint != NULL)
		(void) pg_atomic_read_u64(hint);

	for (int i = 0; i < n; i++)
		texts[i] = pstrdup(constr->check[i].ccbin);
	for (int i = 0; i < n; i++)
		(void) le_planned_check(texts[i]);
}

/*
 * 23514 for a CHECK constraint the row fails (NULL passes, as in SQL).
 * The expressions are read from the relcache's text, copied first (running
 * a constraint may rebuild the relcache entry), and planned on every call
 * in the call's memory, as the executor does (le_planned_check keeps only
 * what planning again could not change): nothing is kept that a replaced
 * function, a changed domain or an invalidation arriving during planning
 * or evaluation could make stale or free under it.
 */
static void
le_check_constraints(Relation rel, HeapTuple tup)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	int			n = constr == NULL ? 0 : constr->num_check;
	char	  **texts;
	Expr	  **exprs;
	char	  **names;
	TupleTableSlot *slot;
	ExprContext *econtext;

	if (n == 0)
		return;
	texts = palloc(sizeof(char *) * n);
	exprs = palloc(sizeof(Expr *) * n);
	names = palloc(sizeof(char *) * n);
	for (int i = 0; i < n; i++)
	{
		texts[i] = pstrdup(constr->check[i].ccbin);
		names[i] = pstrdup(constr->check[i].ccname);
	}
	for (int i = 0; i < n; i++)
		exprs[i] = le_planned_check(texts[i]);

	slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsHeapTuple);
	ExecStoreHeapTuple(tup, slot, false);
	econtext = CreateStandaloneExprContext();
	econtext->ecxt_scantuple = slot;
	for (int i = 0; i < n; i++)
	{
		ExprState  *state = ExecInitExpr(exprs[i], NULL);

		if (!ExecCheck(state, econtext))
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("new row for relation \"%s\" violates check constraint \"%s\"",
							RelationGetRelationName(rel), names[i]),
					 errtableconstraint(rel, names[i])));
	}
	FreeExprContext(econtext, true);
	ExecDropSingleTupleTableSlot(slot);
}

/*
 * May rows of rel be inserted by le_direct_insert(), maintaining index
 * `only_index` itself?  A plain heap table whose only index is that one,
 * with no trigger (unless the caller vouches for the ones there, as the
 * lease cache's own: only_our_triggers), no rule, no row-level security
 * that applies to its owner (FORCE), not a partition or a parent, and no
 * column that an INSERT would fill or coerce (default, identity, generated,
 * type modifier).
 */
bool
le_direct_insert_allowed(Relation rel, Oid only_index, bool only_our_triggers)
{
	List	   *indexes;
	bool		ok;

	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		rel->rd_rel->relhassubclass || rel->rd_rel->relispartition ||
		(rel->trigdesc != NULL && !only_our_triggers) ||
		rel->rd_rules != NULL ||
		(rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity) ||
		(rel->rd_att->constr != NULL && rel->rd_att->constr->has_generated_stored))
		return false;
	/* Every column is written as given: nothing an INSERT would add or refuse. */
	for (int i = 0; i < RelationGetDescr(rel)->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), i);

		if (!att->attisdropped &&
			(att->atthasdef || att->attidentity != '\0' ||
			 att->attgenerated != '\0' || att->atttypmod != -1))
			return false;
	}
	indexes = RelationGetIndexList(rel);
	ok = OidIsValid(only_index) && list_length(indexes) == 1 &&
		linitial_oid(indexes) == only_index;
	list_free(indexes);
	if (ok)
	{
		/* Keys are plain columns (le_direct_insert copies them), no predicate. */
		Relation	idx = index_open(only_index, AccessShareLock);

		ok = idx->rd_index->indisvalid && idx->rd_index->indisready &&
			RelationGetIndexExpressions(idx) == NIL &&
			RelationGetIndexPredicate(idx) == NIL;
		for (int i = 0; ok && i < idx->rd_index->indnatts; i++)
			ok = idx->rd_index->indkey.values[i] > 0;
		index_close(idx, NoLock);
	}
	return ok;
}

/*
 * The entry of the row version at tid (values/nulls in table column order)
 * in rel's only index idx, with the unique check if idx is unique.
 * key_unchanged: an UPDATE's new version of a row whose key stays.
 */
static void
le_index_entry(Relation rel, Relation idx, Datum *values, bool *nulls,
			   ItemPointer tid, bool key_unchanged)
{
	Datum		keys[INDEX_MAX_KEYS];
	bool		key_nulls[INDEX_MAX_KEYS];

	for (int i = 0; i < idx->rd_index->indnatts; i++)
	{
		AttrNumber	att = idx->rd_index->indkey.values[i];

		keys[i] = values[att - 1];
		key_nulls[i] = nulls[att - 1];
	}
	index_insert(idx, keys, key_nulls, tid, rel,
				 idx->rd_index->indisunique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
				 key_unchanged, BuildIndexInfo(idx));
}

/* ---- the insert page hints (WHERE AN INSERTED ROW GOES) ---- */

#define LE_INSERT_HINTS		64

/* Per slot: the table's OID (high 32 bits) and the page (low 32 bits). */
static pg_atomic_uint64 *le_insert_hints = NULL;

Size
le_insert_hints_shmem_size(void)
{
	return sizeof(pg_atomic_uint64) * LE_INSERT_HINTS;
}

void
le_insert_hints_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_insert_hints = ShmemInitStruct("leader_election insert hints",
									  le_insert_hints_shmem_size(), &found);
	if (!found)
		for (int i = 0; i < LE_INSERT_HINTS; i++)
			pg_atomic_init_u64(&le_insert_hints[i], 0);
	LWLockRelease(AddinShmemInitLock);
}

/* rel's hint slot; NULL without shared memory (library not preloaded). */
static pg_atomic_uint64 *
le_insert_hint(Relation rel)
{
	uint32		key[2] = {MyDatabaseId, RelationGetRelid(rel)};

	if (le_insert_hints == NULL)
		return NULL;
	return &le_insert_hints[hash_bytes((const unsigned char *) key,
									   sizeof(key)) % LE_INSERT_HINTS];
}

/*
 * Insert one row (values/nulls in table column order) into rel and its
 * only index idx, as INSERT would.  Caller: relations locked with
 * RowExclusiveLock, le_direct_insert_allowed() true under that lock.  The
 * row is visible to the next command of this transaction.
 */
void
le_direct_insert(Relation rel, Relation idx, Datum *values, bool *nulls)
{
	HeapTuple	tup;
	pg_atomic_uint64 *hint = le_insert_hint(rel);

	le_check_not_null(rel, nulls);
	tup = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	le_check_constraints(rel, tup);
	if (hint != NULL && RelationGetTargetBlock(rel) == InvalidBlockNumber)
	{
		uint64		h = pg_atomic_read_u64(hint);

		if ((Oid) (h >> 32) == RelationGetRelid(rel) &&
			(BlockNumber) h < RelationGetNumberOfBlocks(rel))
			RelationSetTargetBlock(rel, (BlockNumber) h);
	}
	heap_insert(rel, tup, GetCurrentCommandId(true), 0, NULL);
	if (hint != NULL)
		pg_atomic_write_u64(hint, ((uint64) RelationGetRelid(rel) << 32) |
							ItemPointerGetBlockNumber(&tup->t_self));
	le_index_entry(rel, idx, values, nulls, &tup->t_self, false);
	heap_freetuple(tup);
	CommandCounterIncrement();
}

/*
 * Replace the version of a row at otid (found by the caller under the
 * latest snapshot) by newtup, as UPDATE would: checks first, then
 * heap_update, waiting for a transaction that is changing the row.  On
 * TM_Ok the new version has its index entry (unless HOT) and is visible to
 * the next command; TM_Updated or TM_Deleted means a concurrent
 * transaction changed the row and committed, TM_SelfModified that the
 * current command of this transaction did (a statement that changed the
 * row before calling the extension): nothing was written.
 * Caller: as for le_direct_insert.
 */
TM_Result
le_direct_update(Relation rel, Relation idx, ItemPointer otid, HeapTuple newtup)
{
	Datum	   *values = palloc(sizeof(Datum) * RelationGetDescr(rel)->natts);
	bool	   *nulls = palloc(sizeof(bool) * RelationGetDescr(rel)->natts);
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	TM_Result	result;

	/* Refused, as UPDATE is, under a publication the table cannot serve. */
	CheckCmdReplicaIdentity(rel, CMD_UPDATE);
	heap_deform_tuple(newtup, RelationGetDescr(rel), values, nulls);
	le_check_not_null(rel, nulls);
	le_check_constraints(rel, newtup);
	result = le_heap_update(rel, otid, newtup, GetCurrentCommandId(true),
							&tmfd, &lockmode);
	if (result == TM_Ok)
	{
		/* The key is unchanged: the unique check skips the old version. */
		if (!HeapTupleIsHeapOnly(newtup))
			le_index_entry(rel, idx, values, nulls, &newtup->t_self, true);
		CommandCounterIncrement();
	}
	else if (result != TM_Updated && result != TM_Deleted &&
			 result != TM_SelfModified)
		elog(ERROR, "unexpected result %d updating a row of \"%s\"",
			 (int) result, RelationGetRelationName(rel));
	pfree(values);
	pfree(nulls);
	return result;
}
