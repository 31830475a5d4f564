/*-------------------------------------------------------------------------
 *
 * input.c
 *	  Validation of every value a caller hands to leader_election.
 *
 * Each check raises a clear error with its SQLSTATE before anything is
 * locked, read or written, so bad input never changes anything:
 *	  NULL where a value is required          22004
 *	  empty, over-long, control characters,
 *	  invisible or bidirectional formatting   22023
 *	  interval infinite, with months, out of
 *	  bounds                                  22023
 *
 * Names and holders are compared byte-wise everywhere (COLLATE "C"), so no
 * normalisation happens here: 'Job', 'job' and the NFC and NFD spellings of
 * a name are four different leases.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_conversion.h"
#include "catalog/pg_namespace.h"
#include "common/int.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "leader_election.h"

/*
 * Characters refused in names and holders besides the C0 controls and DEL:
 * they would forge lines in the server log, drive a terminal that shows it,
 * or make a name look like another one in monitoring output.
 *
 *	  UTF8          C1 controls U+0080-U+009F; Unicode format characters
 *	                (Cf: bidirectional overrides and isolates, zero-width
 *	                characters, soft hyphen, tags, ...) and the line and
 *	                paragraph separators (Zl, Zp)
 *	  SQL_ASCII     the server does not know what the bytes mean, so they
 *	                are checked as UTF-8, as above; bytes that are not
 *	                valid UTF-8 are refused
 *	  LATIN1-10, ISO_8859_5-8
 *	                the C1 controls, bytes 0x80-0x9F (0x9B is an 8-bit
 *	                terminal's CSI)
 *	  other encodings (WIN*, KOI8*, EUC_*, MULE_INTERNAL)
 *	                nothing more: bytes 0x80-0x9F are printable characters
 *	                or parts of multibyte characters there
 *
 * And in every encoding but UTF8 and SQL_ASCII, characters that have no
 * UTF-8 equivalent (WIN1252's undefined 0x81, 0x8D, 0x8F, 0x90, 0x9D, say;
 * le_utf8_conversion_problem): monitoring reads names, holders and info
 * through UTF-8 clients (postgres_exporter, most drivers), and one such
 * character in one role's row makes every read of the leaders view that
 * includes it fail (22P05), blanking every other role's leases there.
 */

/* Cf, Zl and Zp as of Unicode 15.0, sorted; both ends included. */
static const struct
{
	pg_wchar	first;
	pg_wchar	last;
}			le_refused_ranges[] = {
	{0x00AD, 0x00AD}, {0x0600, 0x0605}, {0x061C, 0x061C}, {0x06DD, 0x06DD},
	{0x070F, 0x070F}, {0x0890, 0x0891}, {0x08E2, 0x08E2}, {0x180E, 0x180E},
	{0x200B, 0x200F}, {0x2028, 0x202E}, {0x2060, 0x2064}, {0x2066, 0x206F},
	{0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFB}, {0x110BD, 0x110BD},
	{0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3},
	{0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F},
};

static bool
le_is_refused_code_point(pg_wchar c)
{
	int			lo = 0;
	int			hi = lengthof(le_refused_ranges) - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;

		if (c < le_refused_ranges[mid].first)
			hi = mid - 1;
		else if (c > le_refused_ranges[mid].last)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* The problem with the UTF-8 text s (len bytes), or NULL if none. */
static const char *
le_utf8_problem(const unsigned char *s, size_t len)
{
	size_t		i = 0;

	while (i < len)
	{
		int			n = (s[i] < 0x80) ? 1 : pg_utf_mblen(&s[i]);
		pg_wchar	c;

		if (s[i] < 0x80)
		{
			i++;
			continue;
		}
		/* Only SQL_ASCII text can get here unvalidated. */
		if (i + n > len || !pg_utf8_islegal(&s[i], n))
			return "must be valid UTF-8 in a SQL_ASCII database";
		c = utf8_to_unicode(&s[i]);
		if (c <= 0x9F)
			return "must not contain control characters";
		if (le_is_refused_code_point(c))
			return psprintf("must not contain U+%04X (format characters and line and paragraph separators are not allowed)",
							c);
		i += n;
	}
	return NULL;
}

/*
 * The problem with s (len bytes of the database's encoding, neither UTF8 nor
 * SQL_ASCII) if some character has no UTF-8 equivalent, else NULL.
 * Converted with pg_catalog's default conversion, never one a caller's
 * search_path could supply.  Needs a transaction (catalog lookup); a setting
 * checked outside one (read at a backend's start) is checked again where it
 * is used (le_resolve_identity).
 */
const char *
le_utf8_conversion_problem(const char *s, size_t len)
{
	int			encoding = GetDatabaseEncoding();
	Oid			proc;
	unsigned char *buf;
	Size		buflen;
	int			converted;

	if (encoding == PG_UTF8 || encoding == PG_SQL_ASCII || !IsTransactionState())
		return NULL;
	proc = FindDefaultConversion(PG_CATALOG_NAMESPACE, encoding, PG_UTF8);
	if (!OidIsValid(proc))
		return NULL;			/* no UTF-8 client can connect to this database */
	buflen = (Size) len * MAX_CONVERSION_GROWTH + 1;
	buf = palloc(buflen);
	converted = pg_do_encoding_conversion_buf(proc, encoding, PG_UTF8,
											  (unsigned char *) unconstify(char *, s),
											  (int) len, buf, (int) buflen, true);
	pfree(buf);
	if ((size_t) converted != len)
		return "must not contain characters that have no UTF-8 equivalent";
	return NULL;
}

/* The problem with the characters of s (len bytes), or NULL if none. */
static const char *
le_character_problem(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *) s;
	bool		high = false;
	int			encoding;

	for (size_t i = 0; i < len; i++)
	{
		if (u[i] < 0x20 || u[i] == 0x7F)
			return "must not contain control characters";
		if (u[i] >= 0x80)
			high = true;
	}
	if (!high)
		return NULL;

	encoding = GetDatabaseEncoding();
	if (encoding == PG_UTF8 || encoding == PG_SQL_ASCII)
		return le_utf8_problem(u, len);
	if ((encoding >= PG_LATIN1 && encoding <= PG_LATIN10) ||
		(encoding >= PG_ISO_8859_5 && encoding <= PG_ISO_8859_8))
	{
		for (size_t i = 0; i < len; i++)
			if (u[i] >= 0x80 && u[i] <= 0x9F)
				return "must not contain control characters";
	}
	return le_utf8_conversion_problem(s, len);
}

/*
 * What is wrong with a name or holder, or NULL if nothing is.  Shared by the
 * argument checks and the leader_election.holder_id check hook.
 */
const char *
le_label_problem(const char *s, int max_bytes)
{
	size_t		len = strlen(s);

	if (len == 0)
		return "must not be empty";
	if (len > (size_t) max_bytes)
		return psprintf("is too long (%zu bytes; at most %d are allowed)",
						len, max_bytes);
	return le_character_problem(s, len);
}

static void
le_check_label(const char *s, const char *what, int max_bytes)
{
	const char *problem = le_label_problem(s, max_bytes);

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s %s", what, problem)));
}

/* The election name in argument argno: required, 1-255 bytes, printable. */
char *
le_checked_name(FunctionCallInfo fcinfo, int argno)
{
	char	   *name;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease name must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	le_check_label(name, "lease name", LE_MAX_NAME_BYTES);
	return name;
}

/*
 * A holder given explicitly (argument or setting).  It names a holder that
 * outlives sessions, so it may not pose as a session identity.
 */
void
le_check_holder_text(const char *holder, const char *what)
{
	le_check_label(holder, what, LE_MAX_HOLDER_BYTES);
	if (strncmp(holder, LE_SESSION_PREFIX, strlen(LE_SESSION_PREFIX)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not start with \"%s\"", what, LE_SESSION_PREFIX),
				 errdetail("That prefix is reserved for session identities."),
				 errhint("Omit the holder to hold the lease under this session's identity.")));
}

/* The optional holder in argument argno; NULL means "not given". */
char *
le_checked_optional_holder(FunctionCallInfo fcinfo, int argno)
{
	char	   *holder;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	holder = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	le_check_holder_text(holder, "holder");
	return holder;
}

/*
 * An interval argument as microseconds.  Months and years have no fixed
 * length and are refused; a day counts as exactly 24 hours, whatever the
 * time zone does that day.
 */
int64
le_checked_interval(FunctionCallInfo fcinfo, int argno, const char *what,
					int64 min_usecs, int64 max_usecs, const char *bounds)
{
	Interval   *iv;
	int64		usecs;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	iv = PG_GETARG_INTERVAL_P(argno);
	if (le_interval_is_infinite(iv))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be finite", what),
				 errhint("Use days, hours, minutes or seconds.")));
	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not contain months or years", what),
				 errdetail("A month has no fixed length."),
				 errhint("Use days, hours, minutes or seconds.")));

	/* Days are bounded well below overflow by the maximum checked below. */
	if (iv->day > 1000000 || iv->day < -1000000 ||
		pg_add_s64_overflow(iv->time, (int64) iv->day * USECS_PER_DAY, &usecs) ||
		usecs < min_usecs || usecs > max_usecs)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %s", what, bounds),
				 min_usecs > 0 ?
				 errhint("Shorter leases would make leadership flap; longer ones would block a name for days after its holder vanished.") : 0));
	return usecs;
}
