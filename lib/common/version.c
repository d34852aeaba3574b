/*
 * version.c - the version of dptools, given by the Makefile (VERSION) as
 * -DDP_VERSION: the programs' --version, checkpoints' "producer" and the
 * S3 User-Agent all read it from here.
 */
#include "dp.h"

#ifndef DP_VERSION
#error "DP_VERSION is set by the Makefile: -DDP_VERSION='\"x.y.z\"'"
#endif

const char *dp_version(void)
{
	return DP_VERSION;
}
