/*-------------------------------------------------------------------------
 *
 * handover.c
 *	  Reservations made by a hand-over (release_leader with a successor)
 *	  or a move (leader_election.move_leader): who may take a lease that
 *	  was just given up.
 *
 * THE RULE (I9 in lease.c)
 *
 *	  When term T of a name ends by a hand-over or a move, the transaction
 *	  that ends it (holding the name's writer lock) records a reservation
 *	  for T (table leader_election.handovers, lease_store.c) lasting one ttl
 *	  of the ended lease (expires_at - renewed_at of T's last grant or
 *	  renewal) from that transaction's commit.  While the lease is still in
 *	  term T with no holder and that time has not passed:
 *		- with a successor, only the successor may take the lease;
 *		- without one (a move only), anyone but T's holder may.
 *	  The first takeover gives the lease a new term, which makes the
 *	  reservation stale: it never needs to be deleted.  It is matched on
 *	  the term and the expiry the end gave the lease (the instant of the
 *	  end), so even a term number issued again after the term counter was
 *	  moved back (which voids I2) does not find an old reservation.
 *
 * The reservation runs from the commit that makes it, not from the call:
 * the statement writes end + ttl, and the commit moves it (R3 in
 * commit_rules.c).  A fence of T (I6) held past the commit still keeps
 * every takeover out while the ttl runs (documented).
 *
 * Only holderless leases can be reserved (a release or a move leaves no
 * holder), so an expired lease's takeover, the usual failover, never reads
 * the reservations.  This file decides; lease.c asks it under the writer
 * lock before every takeover of a holderless lease, and lease_store.c
 * stores.  It must never write a lease row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "leader_election.h"

/*
 * The optional successor in argument argno; NULL if not given.  Checked as
 * a name is; unlike an explicit holder it may be a session identity
 * (session:..., as current_leader() shows it), which must then have the
 * shape of one.
 */
char *
le_checked_optional_successor(FunctionCallInfo fcinfo, int argno)
{
	char	   *successor;
	const char *problem;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	successor = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	problem = le_label_problem(successor, LE_MAX_HOLDER_BYTES);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("successor %s", problem)));
	if (strncmp(successor, LE_SESSION_PREFIX, strlen(LE_SESSION_PREFIX)) == 0 &&
		!le_session_identity_well_formed(successor))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("successor \"%s\" is not a session identity", successor),
				 errdetail("A successor starting with \"%s\" names a live session as current_leader() shows it: \"%s<pid>:<start>@<system identifier>.<timeline>\".",
						   LE_SESSION_PREFIX, LE_SESSION_PREFIX),
				 errhint("Copy the identity from current_leader(), or name a holder without that prefix.")));
	return successor;
}

/*
 * Reserve the lease whose term `ended` just ended at `now` (the caller
 * holds the writer lock and has just ended it).
 */
void
le_handover_reserve(const char *name, const LeaseRow *ended,
					const char *successor, bool moved, TimestampTz now)
{
	LeHandover	h;
	int64		ttl = ended->expires_at - ended->renewed_at;

	if (ttl < 0)
		ttl = 0;
	h.term = ended->term;
	h.previous_holder = ended->holder;
	h.successor = (char *) successor;
	h.moved = moved;
	h.ended_at = now;			/* le_store_release set expires_at to it */
	h.reserved_until = now + ttl;
	le_store_set_handover(name, &h);
	le_commit_note_reservation(name, h.term, h.ended_at, ttl);
}

/*
 * The holder a reservation in force bars while anyone else may take the
 * lease (a move without a successor bars the moved holder), or NULL.  A
 * reservation for a successor bars everyone else: no waiter but the
 * successor can take the lease, and the successor is never outranked.
 */
const char *
le_handover_barred_holder(const LeHandover *h, TimestampTz now)
{
	if (h->previous_holder == NULL || h->successor != NULL || now >= h->reserved_until)
		return NULL;
	return h->previous_holder;
}

/*
 * Does a reservation bind `who`'s takeover of the lease `row` shows at
 * `now`?  *h is filled in if a reservation of the row's term exists, in
 * force or not (h->moved tells lease.c how the term ended); else
 * h->moved is false.
 */
LeReservation
le_handover_check(const char *name, const LeaseRow *row,
				  const LeIdentity *who, TimestampTz now, LeHandover *h)
{
	memset(h, 0, sizeof(LeHandover));
	if (!row->found || row->holder != NULL)
		return LE_RESERVATION_NONE;
	if (!le_store_read_handover(name, row->term, row->expires_at, h))
		return LE_RESERVATION_NONE;
	if (now >= h->reserved_until)
		return LE_RESERVATION_NONE;
	if (h->successor != NULL)
		return strcmp(h->successor, who->holder) == 0 ?
			LE_RESERVATION_FOR_ME : LE_RESERVATION_BARS_ME;
	return strcmp(h->previous_holder, who->holder) == 0 ?
		LE_RESERVATION_BARS_ME : LE_RESERVATION_NONE;
}
