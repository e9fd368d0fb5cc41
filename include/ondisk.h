/* SPDX-License-Identifier: BSD-3-Clause */
/* ondisk.h --- ext2/3/4 on-disk fields by name.
 *
 * Byte offsets into a raw superblock, inode record or group descriptor
 * come from the structures of <ext2fs/ext2_fs.h> through offsetof.  The
 * table below is the one place that spells offsets as numbers: it pins
 * each field the daemon reads to its place in the on-disk format
 * (Documentation/filesystems/ext4 in the kernel), so that a header that
 * ever disagreed would fail the build.  jbd2's formats are in jbd2.h.
 */
#ifndef EXT4LAZY_ONDISK_H
#define EXT4LAZY_ONDISK_H

#include <stddef.h>

#include <ext2fs/ext2_fs.h>

/* The primary superblock: its offset from the filesystem's start and
 * its size.
 */
#define SB_OFFSET 1024
#define SB_SIZE 1024

/* Offset and size of field f of the superblock, of an inode record and
 * of a group descriptor.
 */
#define SB_AT(f) offsetof (struct ext2_super_block, f)
#define SB_LEN(f) sizeof (((struct ext2_super_block *)0)->f)
#define INODE_AT(f) offsetof (struct ext2_inode_large, f)
#define INODE_LEN(f) sizeof (((struct ext2_inode_large *)0)->f)
#define GD_AT(f) offsetof (struct ext4_group_desc, f)

_Static_assert (sizeof (struct ext2_super_block) == SB_SIZE,
                "the superblock is 1024 bytes");
_Static_assert (sizeof (struct ext2_inode) == EXT2_GOOD_OLD_INODE_SIZE,
                "the base inode record is 128 bytes");

/* Superblock. */
_Static_assert (SB_AT (s_inodes_count) == 0x00, "s_inodes_count");
_Static_assert (SB_AT (s_blocks_count) == 0x04, "s_blocks_count_lo");
_Static_assert (SB_AT (s_first_data_block) == 0x14, "s_first_data_block");
_Static_assert (SB_AT (s_log_block_size) == 0x18, "s_log_block_size");
_Static_assert (SB_AT (s_log_cluster_size) == 0x1C, "s_log_cluster_size");
_Static_assert (SB_AT (s_blocks_per_group) == 0x20, "s_blocks_per_group");
_Static_assert (SB_AT (s_clusters_per_group) == 0x24, "s_clusters_per_group");
_Static_assert (SB_AT (s_inodes_per_group) == 0x28, "s_inodes_per_group");
_Static_assert (SB_AT (s_magic) == 0x38, "s_magic");
_Static_assert (SB_AT (s_creator_os) == 0x48, "s_creator_os");
_Static_assert (SB_AT (s_rev_level) == 0x4C, "s_rev_level");
_Static_assert (SB_AT (s_first_ino) == 0x54, "s_first_ino");
_Static_assert (SB_AT (s_inode_size) == 0x58, "s_inode_size");
_Static_assert (SB_AT (s_block_group_nr) == 0x5A, "s_block_group_nr");
_Static_assert (SB_AT (s_feature_compat) == 0x5C, "s_feature_compat");
_Static_assert (SB_AT (s_feature_incompat) == 0x60, "s_feature_incompat");
_Static_assert (SB_AT (s_feature_ro_compat) == 0x64, "s_feature_ro_compat");
_Static_assert (SB_AT (s_uuid) == 0x68, "s_uuid");
_Static_assert (SB_AT (s_reserved_gdt_blocks) == 0xCE, "s_reserved_gdt_blocks");
_Static_assert (SB_AT (s_journal_inum) == 0xE0, "s_journal_inum");
_Static_assert (SB_AT (s_desc_size) == 0xFE, "s_desc_size");
_Static_assert (SB_AT (s_first_meta_bg) == 0x104, "s_first_meta_bg");
_Static_assert (SB_AT (s_blocks_count_hi) == 0x150, "s_blocks_count_hi");
_Static_assert (SB_AT (s_min_extra_isize) == 0x15C, "s_min_extra_isize");
_Static_assert (SB_AT (s_log_groups_per_flex) == 0x174,
                "s_log_groups_per_flex");
_Static_assert (SB_AT (s_checksum_type) == 0x175, "s_checksum_type");
_Static_assert (SB_AT (s_checksum_seed) == 0x270, "s_checksum_seed");
_Static_assert (SB_AT (s_checksum) == 0x3FC, "s_checksum, the last word");

/* Inode record (Linux's reading of the OS-dependent unions). */
_Static_assert (INODE_AT (i_mode) == 0x00, "i_mode");
_Static_assert (INODE_AT (i_atime) == 0x08, "i_atime");
_Static_assert (INODE_AT (i_ctime) == 0x0C, "i_ctime");
_Static_assert (INODE_AT (i_mtime) == 0x10, "i_mtime");
_Static_assert (INODE_AT (i_dtime) == 0x14, "i_dtime");
_Static_assert (INODE_AT (i_links_count) == 0x1A, "i_links_count");
_Static_assert (INODE_AT (i_flags) == 0x20, "i_flags");
_Static_assert (INODE_AT (osd1.linux1.l_i_version) == 0x24, "l_i_version");
_Static_assert (INODE_AT (i_block) == 0x28, "i_block");
_Static_assert (INODE_AT (osd2.linux2.l_i_checksum_lo) == 0x7C,
                "l_i_checksum_lo");
_Static_assert (INODE_AT (osd2.linux2.l_i_reserved) == 0x7E, "l_i_reserved");
_Static_assert (INODE_AT (i_extra_isize) == 0x80, "i_extra_isize");
_Static_assert (INODE_AT (i_checksum_hi) == 0x82, "i_checksum_hi");
_Static_assert (INODE_AT (i_ctime_extra) == 0x84, "i_ctime_extra");
_Static_assert (INODE_AT (i_mtime_extra) == 0x88, "i_mtime_extra");
_Static_assert (INODE_AT (i_atime_extra) == 0x8C, "i_atime_extra");
_Static_assert (INODE_AT (i_crtime) == 0x90, "i_crtime");
_Static_assert (INODE_AT (i_crtime_extra) == 0x94, "i_crtime_extra");
_Static_assert (INODE_AT (i_version_hi) == 0x98, "i_version_hi");
_Static_assert (INODE_AT (i_projid) == 0x9C, "i_projid");

/* Group descriptor. */
_Static_assert (GD_AT (bg_inode_table) == 0x08, "bg_inode_table");
_Static_assert (GD_AT (bg_inode_table_hi) == 0x28, "bg_inode_table_hi");

#endif /* EXT4LAZY_ONDISK_H */
