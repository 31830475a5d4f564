/*-------------------------------------------------------------------------
 *
 * keyed_hash.c
 *	  SipHash-2-4 (Aumasson and Bernstein, 2012): a 64-bit pseudorandom
 *	  function of a message under a 128-bit secret key.
 *
 * The names' writer locks are keyed by it (lease.c).  A role that does not
 * know the key cannot compute which name's lock another name's lock would
 * share, even though pg_locks shows every lock's 64 bits to everyone: with a
 * pseudorandom function, outputs seen tell nothing about other outputs.  It
 * was designed for exactly this (hash tables that attackers fill with keys
 * of their choice) and costs a few dozen nanoseconds for a short name,
 * where HMAC-SHA256 through the crypto library cost microseconds of set-up
 * on every call.
 *
 * Written from the paper's description: four 64-bit words of state, two
 * rounds per 8-byte block, four at the end; the last block carries the
 * message length in its top byte.  The test vector of the paper's appendix
 * (key 00..0f, message 00..0e: a129ca6149be45e5) is checked before the
 * first use in each backend (le_writer_locktag), so a build that computed
 * anything else would fail every test that takes a writer lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "leader_election.h"

#define LE_ROTL64(x, b)	(((x) << (b)) | ((x) >> (64 - (b))))

/* One SipRound on the state v[0..3]. */
static inline void
le_sip_round(uint64 *v)
{
	v[0] += v[1];
	v[1] = LE_ROTL64(v[1], 13);
	v[1] ^= v[0];
	v[0] = LE_ROTL64(v[0], 32);
	v[2] += v[3];
	v[3] = LE_ROTL64(v[3], 16);
	v[3] ^= v[2];
	v[0] += v[3];
	v[3] = LE_ROTL64(v[3], 21);
	v[3] ^= v[0];
	v[2] += v[1];
	v[1] = LE_ROTL64(v[1], 17);
	v[1] ^= v[2];
	v[2] = LE_ROTL64(v[2], 32);
}

/* Eight bytes as a little-endian word, whatever the machine's byte order. */
static inline uint64
le_load_le64(const uint8 *p, int n)
{
	uint64		w = 0;

	for (int i = n - 1; i >= 0; i--)
		w = (w << 8) | p[i];
	return w;
}

/* SipHash-2-4 of data[0..len) under the 16-byte key. */
uint64
le_keyed_hash64(const uint8 *key, const uint8 *data, size_t len)
{
	uint64		k0 = le_load_le64(key, 8);
	uint64		k1 = le_load_le64(key + 8, 8);
	uint64		v[4];
	size_t		whole = len - len % 8;
	uint64		last;

	/* "somepseudorandomlygeneratedbytes", as the paper initialises. */
	v[0] = k0 ^ UINT64CONST(0x736f6d6570736575);
	v[1] = k1 ^ UINT64CONST(0x646f72616e646f6d);
	v[2] = k0 ^ UINT64CONST(0x6c7967656e657261);
	v[3] = k1 ^ UINT64CONST(0x7465646279746573);

	for (size_t i = 0; i < whole; i += 8)
	{
		uint64		m = le_load_le64(data + i, 8);

		v[3] ^= m;
		le_sip_round(v);
		le_sip_round(v);
		v[0] ^= m;
	}

	last = ((uint64) (len & 0xff)) << 56 | le_load_le64(data + whole, (int) (len - whole));
	v[3] ^= last;
	le_sip_round(v);
	le_sip_round(v);
	v[0] ^= last;

	v[2] ^= 0xff;
	for (int r = 0; r < 4; r++)
		le_sip_round(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* The paper's test vector; false if this build computes anything else. */
bool
le_keyed_hash_self_test(void)
{
	uint8		key[16];
	uint8		msg[15];

	for (int i = 0; i < 16; i++)
		key[i] = (uint8) i;
	for (int i = 0; i < 15; i++)
		msg[i] = (uint8) i;
	return le_keyed_hash64(key, msg, sizeof(msg)) == UINT64CONST(0xa129ca6149be45e5);
}
