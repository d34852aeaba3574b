/*
 * wire.h - private to lib/records: protobuf wire-format primitives shared by
 * the tf.train.Example view and builder (example.c) and the TensorBoard
 * event encoder and reader (events.c).  See example.c for the wire rules
 * the readers enforce (tags of at most 5 bytes, field numbers 1 to 2^29-1,
 * length prefixes below 2^32, no groups).
 */
#ifndef DP_WIRE_H
#define DP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct field {
	const uint8_t *start; /* the tag */
	uint32_t num;
	int wt;
	uint64_t v;           /* varint value, or fixed bits */
	const uint8_t *data;  /* length-delimited payload */
	size_t len;
} field;

static const char E_NUM[] = "invalid field number";
static const char E_LEN[] = "length prefix out of range";

/* A varint of at most max bytes.  0 on success; -1 truncated or too long.
 * Bits past the 64th are dropped, as protobuf does. */
static inline int rd_varint_slow(const uint8_t **pp, const uint8_t *end, uint64_t *out, int max)
{
	const uint8_t *p = *pp;
	uint64_t v = 0;
	for (int i = 0; i < max; i++) {
		if (p >= end)
			return -1;
		uint8_t b = *p++;
		if (i < 10)
			v |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*pp = p;
			*out = v;
			return 0;
		}
	}
	return -1;
}

static inline int rd_varint_max(const uint8_t **pp, const uint8_t *end, uint64_t *out, int max)
{
	const uint8_t *p = *pp;
	if (p < end && *p < 0x80) {
		*out = *p;
		*pp = p + 1;
		return 0;
	}
	return rd_varint_slow(pp, end, out, max);
}

static inline int rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
	return rd_varint_max(pp, end, out, 10);
}

/* Read the next field at *pp (not at end).  Returns 1 with f filled, -1 on
 * a malformed field (reason in *why). */
static inline __attribute__((always_inline)) int rd_field_at(const uint8_t **pp, const uint8_t *end, field *f, const char **why)
{
	const uint8_t *p = *pp;
	uint64_t tag;
	f->start = p;
	if (rd_varint_max(&p, end, &tag, 5) < 0) {
		*why = "truncated or overlong tag";
		return -1;
	}
	f->num = (uint32_t)(tag >> 3);
	f->wt = (int)(tag & 7);
	if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) {
		*why = E_NUM;
		return -1;
	}
	/* length-delimited first and predicted: a jump table mispredicts */
	if (__builtin_expect(f->wt == 2, 1)) {
		uint64_t len;
		if (rd_varint_max(&p, end, &len, 5) < 0) {
			*why = "truncated or overlong length";
			return -1;
		}
		if (len > 0xffffffffu) {
			*why = E_LEN;
			return -1;
		}
		if (len > (uint64_t)(end - p)) {
			*why = "length runs past the end of the message";
			return -1;
		}
		f->data = p;
		f->len = (size_t)len;
		p += len;
	} else if (f->wt == 0) {
		if (rd_varint(&p, end, &f->v) < 0) {
			*why = "truncated or overlong varint";
			return -1;
		}
	} else if (f->wt == 5) {
		uint32_t x;
		if (end - p < 4) {
			*why = "truncated fixed32";
			return -1;
		}
		memcpy(&x, p, 4);
		f->v = x;
		p += 4;
	} else if (f->wt == 1) {
		if (end - p < 8) {
			*why = "truncated fixed64";
			return -1;
		}
		memcpy(&f->v, p, 8);
		p += 8;
	} else {
		*why = f->wt == 3 || f->wt == 4 ? "groups are not supported" : "invalid wire type";
		return -1;
	}
	*pp = p;
	return 1;
}

/* The next field at *pp: 1 with f filled, 0 at end, -1 malformed. */
static inline int rd_field(const uint8_t **pp, const uint8_t *end, field *f, const char **why)
{
	if (*pp >= end)
		return 0;
	return rd_field_at(pp, end, f, why);
}

/* Write v as a varint at p (at most 10 bytes); returns the byte after it. */
static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

#endif
