# expect.awk --- durability oracle: from the guest console's E2E-DURABLE,
# E2E-DELETED and E2E-TOUCH lines, write OUT/expect.L for every marker L
# (and L = -1): what a crash state whose last marker read is L must hold.
#   "present PATH SIZE SHA256 MTIME CTIME"  declared durable at a marker
#                               <= L (times "SEC.NSEC", or "-": not promised)
#   "absent PATH"               deletion made durable at a marker <= L
# A path changed again after its last declaration, by a change that may
# lie before the crash point (E2E-TOUCH at T with T <= L + 1: the change
# came after marker T - 1 and before marker T), is not checked: its state
# is not promised then.  Usage: awk -v out=DIR -f expect.awk CONSOLE
{ sub(/\r$/, "") }
/^E2E-(DURABLE|DELETED|TOUCH): / {
  # A line cut short (the guest died while printing it) declares nothing.
  if ($1 == "E2E-DURABLE:" && (NF < 5 || length($5) != 64)) next
  kind = $1; seq = $2 + 0; path = $3
  if (seq > max) max = seq
  n++
  K[n] = kind; S[n] = seq; P[n] = path; Z[n] = $4; H[n] = $5
  M[n] = $6 == "" ? "-" : $6; C[n] = $7 == "" ? "-" : $7
}
END {
  for (L = -1; L <= max; L++) {
    f = out "/expect." L
    printf "" > f
    delete last; delete touched
    for (i = 1; i <= n; i++) {
      if (K[i] == "E2E-TOUCH:") {
        if (S[i] <= L + 1) touched[P[i]] = S[i]
        continue
      }
      if (S[i] <= L) last[P[i]] = i
    }
    for (p in last) {
      i = last[p]
      if ((p in touched) && touched[p] > S[i]) continue
      if (K[i] == "E2E-DURABLE:") print "present", p, Z[i], H[i], M[i], C[i] > f
      else print "absent", p > f
    }
    close(f)
  }
}
