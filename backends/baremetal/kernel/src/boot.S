/* 32-bit PVH entry -> long mode -> kmain. AT&T syntax.
   Page tables: the first 2 MiB in 4 KiB pages (page 0 absent, so null pointers fault; kernel
   text and rodata read-only), the rest of the first 1 GiB in 2 MiB pages, RW, and 3..4 GiB
   uncached for the local APIC. CR0.WP is set:
   text is written only through ftrace_baremetal::text::write_text. */

/* PVH: XEN_ELFNOTE_PHYS32_ENTRY (18). For ELF64 QEMU reads an 8-byte value. */
    .section .note.Xen, "a", @note
    .balign 4
    .long 4                 /* namesz */
    .long 8                 /* descsz */
    .long 18                /* type: XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .quad _start32
    .balign 4

    .section .text.boot, "ax"
    .code32
    .global _start32
_start32:
    cli
    cld
    movl %ebx, %ebp                 /* PVH: struct hvm_start_info * */

    /* zero .bss (page tables and the stack live there): no stack use before */
    movl $__bss_start, %edi
    movl $__bss_end, %ecx
    subl %edi, %ecx
    xorl %eax, %eax
    rep stosb
    movl $boot_stack_top, %esp

    movl $boot_pdpt, %eax
    orl $0x3, %eax
    movl %eax, boot_pml4
    movl $boot_pd, %eax
    orl $0x3, %eax
    movl %eax, boot_pdpt
    movl $boot_pd_mmio, %eax
    orl $0x3, %eax
    movl %eax, boot_pdpt + 24       /* PDPT[3]: 3..4 GiB, the local APIC's MMIO */
    xorl %ecx, %ecx
5:  movl %ecx, %eax
    shll $21, %eax
    addl $0xC0000000, %eax
    orl $0x9B, %eax                 /* present | writable | PWT | PCD | 2 MiB page */
    movl %eax, boot_pd_mmio(,%ecx,8)
    incl %ecx
    cmpl $512, %ecx
    jne 5b
    movl $boot_pt, %eax
    orl $0x3, %eax
    movl %eax, boot_pd              /* PD[0] -> 4 KiB page table */
    movl $1, %ecx
1:  movl %ecx, %eax
    shll $21, %eax
    orl $0x83, %eax                 /* present | writable | 2 MiB page */
    movl %eax, boot_pd(,%ecx,8)
    incl %ecx
    cmpl $512, %ecx
    jne 1b
    movl $1, %ecx                   /* PT[0] stays 0: page 0 not present */
2:  movl %ecx, %eax
    shll $12, %eax
    movl $0x3, %edx                 /* present | writable */
    cmpl $__ro_start, %eax
    jb 3f
    cmpl $__ro_end, %eax
    jae 3f
    movl $0x1, %edx                 /* present, read-only */
3:  orl %edx, %eax
    movl %eax, boot_pt(,%ecx,8)
    incl %ecx
    cmpl $512, %ecx
    jne 2b

    /* CR4: PAE | OSFXSR | OSXMMEXCPT (the host target's core uses SSE2) */
    movl %cr4, %eax
    orl $0x620, %eax
    movl %eax, %cr4
    movl $boot_pml4, %eax
    movl %eax, %cr3
    movl $0xC0000080, %ecx          /* EFER.LME */
    rdmsr
    orl $0x100, %eax
    wrmsr
    /* CR0: PG | WP | MP | PE, EM clear */
    movl %cr0, %eax
    andl $0xFFFFFFFB, %eax
    orl $0x80010003, %eax
    movl %eax, %cr0

    lgdt boot_gdt_ptr
    ljmp $0x08, $_start64

    .code64
_start64:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    xorw %ax, %ax
    movw %ax, %fs
    movw %ax, %gs
    movq $boot_stack_top, %rsp
    movl %ebp, %edi                 /* zero-extended: arg0 = hvm_start_info pointer */
    fninit
    call kmain
4:  cli
    hlt
    jmp 4b

    /* writable: loading a segment sets the descriptor's accessed bit */
    .section .data.boot, "aw"
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF        /* 0x08: 64-bit code */
    .quad 0x00CF92000000FFFF        /* 0x10: data */
boot_gdt_end:
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt

    .section .bss.boot, "aw", @nobits
    .balign 4096
    .global boot_pml4
boot_pml4:  .skip 4096
boot_pdpt:  .skip 4096
boot_pd:    .skip 4096
boot_pt:    .skip 4096
boot_pd_mmio: .skip 4096
boot_stack: .skip 262144
boot_stack_top:
