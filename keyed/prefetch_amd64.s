//go:build !admit_purego

#include "textflag.h"

// func prefetchw(p unsafe.Pointer)
TEXT ·prefetchw(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ p+0(FP), AX
	CMPB ·hasPrefetchW(SB), $0
	JEQ  t0
	// PREFETCHW (AX): 0F 0D /1, which the Go assembler does not spell.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET
t0:
	PREFETCHT0 (AX)
	RET

// func cpuPrefetchW() bool
TEXT ·cpuPrefetchW(SB), NOSPLIT, $0-1
	MOVL $0x80000000, AX
	XORL CX, CX
	CPUID
	CMPL AX, $0x80000001
	JB   no
	MOVL $0x80000001, AX
	XORL CX, CX
	CPUID
	SHRL $8, CX
	ANDL $1, CX
	MOVB CX, ret+0(FP)
	RET
no:
	MOVB $0, ret+0(FP)
	RET
