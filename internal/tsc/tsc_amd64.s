//go:build !admit_purego

#include "textflag.h"

// func rdtsc() uint64
TEXT ·rdtsc(SB), NOSPLIT|NOFRAME, $0-8
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET

// func rdtscp() uint64
TEXT ·rdtscp(SB), NOSPLIT|NOFRAME, $0-8
	RDTSCP
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET

// func cpuid(leaf uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT|NOFRAME, $0-24
	MOVL leaf+0(FP), AX
	XORL CX, CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET
