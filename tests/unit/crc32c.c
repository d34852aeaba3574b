/* crc32c.c - CRC-32C against published vectors (RFC 3720 B.4, the check
 * value of the Castagnoli polynomial), and the SSE4.2 path against the
 * portable one over every alignment and many lengths. */
#include "dp_record.h"
#include "tap.h"

#include <stdlib.h>

int main(void)
{
	uint8_t buf[48];
	is_int(dp_crc32c(0, "123456789", 9), 0xe3069283u, "check value of \"123456789\"");
	memset(buf, 0, 32);
	is_int(dp_crc32c(0, buf, 32), 0x8a9136aau, "RFC 3720: 32 bytes of zeros");
	memset(buf, 0xff, 32);
	is_int(dp_crc32c(0, buf, 32), 0x62a8ab43u, "RFC 3720: 32 bytes of ones");
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	is_int(dp_crc32c(0, buf, 32), 0x46dd794eu, "RFC 3720: 32 incrementing bytes");
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	is_int(dp_crc32c(0, buf, 32), 0x113fdb5cu, "RFC 3720: 32 decrementing bytes");
	static const uint8_t pdu[48] = {
		0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18,
		0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0};
	is_int(dp_crc32c(0, pdu, 48), 0xd9963a56u, "RFC 3720: iSCSI read PDU");
	is_int(dp_crc32c(0, "", 0), 0, "empty input");
	is_int(dp_crc32c(dp_crc32c(0, "12345", 5), "6789", 4), 0xe3069283u, "extending in pieces");
	is_int(dp_crc_unmask(dp_crc_mask(0x12345678u)), 0x12345678u, "unmask inverts mask");
	/* TensorFlow's masking of the check value: ((c>>15)|(c<<17))+0xa282ead8 */
	uint32_t c = 0xe3069283u;
	is_int(dp_crc_mask(c), (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u), "mask formula");

	size_t n = 3 * 8192 * 2 + 1000;
	uint8_t *big = malloc(n + 8);
	srand(1);
	for (size_t i = 0; i < n + 8; i++)
		big[i] = (uint8_t)rand();
	int bad = 0;
	for (int align = 0; align < 8; align++)
		for (size_t len = 0; len < n; len = len < 100 ? len + 1 : len * 3 / 2 + 7)
			if (dp_crc32c(0, big + align, len) != dp_crc32c_portable(0, big + align, len))
				bad++;
	uint32_t whole = dp_crc32c(0, big, n);
	ok(bad == 0, "%s path equals the portable path (all alignments, lengths to %zu)",
	   dp_crc32c_impl(), n);
	is_int(dp_crc32c(dp_crc32c(0, big, 10000), big + 10000, n - 10000), whole,
	       "long input extended in two pieces");
	free(big);
	return done_testing();
}
