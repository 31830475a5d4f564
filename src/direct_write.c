/*-------------------------------------------------------------------------
 *
 * direct_write.c
 *	  Inserting a row without the executor, keeping what the executor keeps.
 *
 * A grant of a new name inserts two rows (the lease and its term's history
 * row).  Through SPI, most of its CPU went to starting the executor for
 * them: building the plan state of the statement and its CTE, opening
 * the indexes.  Under
 * a storm of grants that cost is what stands between a grant and the speed
 * of an ordinary one-row INSERT (bench/grants.sh, T8).
 *
 * le_direct_insert() does what the executor's INSERT does for a table of
 * the shape le_direct_insert_allowed() accepts, and nothing else:
 *
 *	  - NOT NULL: every column marked NOT NULL, whoever marked it, is
 *		checked (23502), before anything is written;
 *	  - CHECK: every CHECK constraint of the table, whoever added it, is
 *		evaluated on the new row (23514), planned on every call as the
 *		executor plans it (keeping them across calls went stale and was
 *		freed under a running check: see le_check_constraints);
 *	  - the heap tuple (heap_insert: WAL, statistics, SERIALIZABLE's
 *		conflict checks) and the entry of the table's only index, with the
 *		unique check (23505, waiting for an in-progress conflicting insert
 *		as the executor does).
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
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "executor/executor.h"
#include "nodes/readfuncs.h"
#include "optimizer/optimizer.h"
#include "utils/memutils.h"
#include "utils/rel.h"

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
 * 23514 for a CHECK constraint the row fails (NULL passes, as in SQL).
 * The expressions are read from the relcache's text and planned on every
 * call, in the call's memory, as the executor does: nothing is kept that a
 * replaced function, a changed domain or an invalidation arriving during
 * planning or evaluation could make stale or free under it.
 */
static void
le_check_constraints(Relation rel, HeapTuple tup)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	int			n = constr == NULL ? 0 : constr->num_check;
	Expr	  **exprs;
	char	  **names;
	TupleTableSlot *slot;
	ExprContext *econtext;

	if (n == 0)
		return;
	/* Copied first: running a constraint may rebuild the relcache entry. */
	exprs = palloc(sizeof(Expr *) * n);
	names = palloc(sizeof(char *) * n);
	for (int i = 0; i < n; i++)
	{
		exprs[i] = expression_planner(stringToNode(constr->check[i].ccbin));
		names[i] = pstrdup(constr->check[i].ccname);
	}

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
 * Insert one row (values/nulls in table column order) into rel and its
 * only index idx, as INSERT would.  Caller: relations locked with
 * RowExclusiveLock, le_direct_insert_allowed() true under that lock.  The
 * row is visible to the next command of this transaction.
 */
void
le_direct_insert(Relation rel, Relation idx, Datum *values, bool *nulls)
{
	HeapTuple	tup;
	Datum		keys[INDEX_MAX_KEYS];
	bool		key_nulls[INDEX_MAX_KEYS];
	int			nkeys = idx->rd_index->indnatts;

	le_check_not_null(rel, nulls);
	tup = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	le_check_constraints(rel, tup);
	heap_insert(rel, tup, GetCurrentCommandId(true), 0, NULL);
	for (int i = 0; i < nkeys; i++)
	{
		AttrNumber	att = idx->rd_index->indkey.values[i];

		keys[i] = values[att - 1];
		key_nulls[i] = nulls[att - 1];
	}
	index_insert(idx, keys, key_nulls, &tup->t_self, rel,
				 idx->rd_index->indisunique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
				 false, BuildIndexInfo(idx));
	heap_freetuple(tup);
	CommandCounterIncrement();
}
