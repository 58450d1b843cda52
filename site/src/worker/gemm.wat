;; slm's matrix products for Pyodide (py/slm/matmul.py), whose NumPy has no BLAS and no SIMD: 128-bit SIMD
;; over blocks of the output (gemm: 4 rows x 8 columns; gemm_nt, for a weight stored (out, in): 2 rows x 4 columns). sitebuild/kernels.py assembles it and makes it a side
;; module that Pyodide's ctypes.CDLL loads into the interpreter's own memory, so the arrays are read in place.
(module
  (import "env" "memory" (memory 0))
  ;; c (m x n) = A (m x k) . b (k x n), float32, b and c row-major, A[i, p] at a + 4 (i a_row + p a_col): so A may
  ;; be a transposed view (a weight's gradient sums the rows of two activations).
  (func $gemm (export "gemm")
    (param $a i32) (param $b i32) (param $c i32) (param $m i32) (param $k i32) (param $n i32)
    (param $a_row i32) (param $a_col i32)
    (local $i i32) (local $j i32) (local $p i32) (local $pa i32) (local $pb i32) (local $pc i32)
    (local $ra i32) (local $da i32) (local $rb i32) (local $rc i32) (local $x v128)
    (local $b0 v128) (local $b1 v128)
    (local $c00 v128) (local $c01 v128) (local $c10 v128) (local $c11 v128)
    (local $c20 v128) (local $c21 v128) (local $c30 v128) (local $c31 v128)
    (local.set $ra (i32.shl (local.get $a_row) (i32.const 2)))
    (local.set $da (i32.shl (local.get $a_col) (i32.const 2)))
    (local.set $rb (i32.shl (local.get $n) (i32.const 2)))
    ;; blocks of 4 rows x 8 columns: eight accumulators, each product of a row's A[i, p] with two vectors of b's row p
    (local.set $i (i32.const 0))
    (block $rows_done
      (loop $rows
        (br_if $rows_done (i32.gt_s (i32.add (local.get $i) (i32.const 4)) (local.get $m)))
        (local.set $j (i32.const 0))
        (block $cols_done
          (loop $cols
            (br_if $cols_done (i32.gt_s (i32.add (local.get $j) (i32.const 8)) (local.get $n)))
            (local.set $c00 (v128.const i32x4 0 0 0 0)) (local.set $c01 (v128.const i32x4 0 0 0 0))
            (local.set $c10 (v128.const i32x4 0 0 0 0)) (local.set $c11 (v128.const i32x4 0 0 0 0))
            (local.set $c20 (v128.const i32x4 0 0 0 0)) (local.set $c21 (v128.const i32x4 0 0 0 0))
            (local.set $c30 (v128.const i32x4 0 0 0 0)) (local.set $c31 (v128.const i32x4 0 0 0 0))
            (local.set $pa (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $ra))))
            (local.set $pb (i32.add (local.get $b) (i32.shl (local.get $j) (i32.const 2))))
            (local.set $p (local.get $k))
            (block $dot_done
              (loop $dot
                (br_if $dot_done (i32.eqz (local.get $p)))
                (local.set $b0 (v128.load (local.get $pb)))
                (local.set $b1 (v128.load offset=16 (local.get $pb)))
                (local.set $x (f32x4.splat (f32.load (local.get $pa))))
                (local.set $c00 (f32x4.add (local.get $c00) (f32x4.mul (local.get $x) (local.get $b0))))
                (local.set $c01 (f32x4.add (local.get $c01) (f32x4.mul (local.get $x) (local.get $b1))))
                (local.set $x (f32x4.splat (f32.load (i32.add (local.get $pa) (local.get $ra)))))
                (local.set $c10 (f32x4.add (local.get $c10) (f32x4.mul (local.get $x) (local.get $b0))))
                (local.set $c11 (f32x4.add (local.get $c11) (f32x4.mul (local.get $x) (local.get $b1))))
                (local.set $x (f32x4.splat (f32.load (i32.add (local.get $pa) (i32.shl (local.get $ra) (i32.const 1))))))
                (local.set $c20 (f32x4.add (local.get $c20) (f32x4.mul (local.get $x) (local.get $b0))))
                (local.set $c21 (f32x4.add (local.get $c21) (f32x4.mul (local.get $x) (local.get $b1))))
                (local.set $x (f32x4.splat (f32.load (i32.add (local.get $pa) (i32.mul (local.get $ra) (i32.const 3))))))
                (local.set $c30 (f32x4.add (local.get $c30) (f32x4.mul (local.get $x) (local.get $b0))))
                (local.set $c31 (f32x4.add (local.get $c31) (f32x4.mul (local.get $x) (local.get $b1))))
                (local.set $pa (i32.add (local.get $pa) (local.get $da)))
                (local.set $pb (i32.add (local.get $pb) (local.get $rb)))
                (local.set $p (i32.sub (local.get $p) (i32.const 1)))
                (br $dot)))
            (local.set $pc (i32.add (local.get $c) (i32.shl (i32.add (i32.mul (local.get $i) (local.get $n)) (local.get $j)) (i32.const 2))))
            (v128.store (local.get $pc) (local.get $c00))
            (v128.store offset=16 (local.get $pc) (local.get $c01))
            (local.set $pc (i32.add (local.get $pc) (local.get $rb)))
            (v128.store (local.get $pc) (local.get $c10))
            (v128.store offset=16 (local.get $pc) (local.get $c11))
            (local.set $pc (i32.add (local.get $pc) (local.get $rb)))
            (v128.store (local.get $pc) (local.get $c20))
            (v128.store offset=16 (local.get $pc) (local.get $c21))
            (local.set $pc (i32.add (local.get $pc) (local.get $rb)))
            (v128.store (local.get $pc) (local.get $c30))
            (v128.store offset=16 (local.get $pc) (local.get $c31))
            (local.set $j (i32.add (local.get $j) (i32.const 8)))
            (br $cols)))
        ;; the columns past the last block of 8, one by one
        (call $scalar (local.get $a) (local.get $b) (local.get $c) (local.get $k) (local.get $n) (local.get $a_row)
              (local.get $a_col) (local.get $i) (i32.add (local.get $i) (i32.const 4)) (local.get $j))
        (local.set $i (i32.add (local.get $i) (i32.const 4)))
        (br $rows)))
    ;; the rows past the last block of 4 (a generated token's only row): each row of b streamed once, in order,
    ;; into the output row, which stays in cache
    (block $tail_done
      (loop $tail
        (br_if $tail_done (i32.ge_s (local.get $i) (local.get $m)))
        (call $row_axpy (local.get $a) (local.get $b) (local.get $c) (local.get $k) (local.get $n)
              (local.get $a_row) (local.get $a_col) (local.get $i))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $tail))))
  ;; c[i, :] = sum over p of A[i, p] b[p, :]
  (func $row_axpy
    (param $a i32) (param $b i32) (param $c i32) (param $k i32) (param $n i32) (param $a_row i32) (param $a_col i32)
    (param $i i32)
    (local $pa i32) (local $pb i32) (local $pc i32) (local $end i32) (local $end4 i32) (local $q i32) (local $p i32)
    (local $x v128) (local $xs f32)
    (local.set $pc (i32.add (local.get $c) (i32.shl (i32.mul (local.get $i) (local.get $n)) (i32.const 2))))
    (local.set $end (i32.shl (local.get $n) (i32.const 2)))
    (local.set $end4 (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2)))
    (memory.fill (local.get $pc) (i32.const 0) (local.get $end))
    (local.set $pa (i32.add (local.get $a) (i32.shl (i32.mul (local.get $i) (local.get $a_row)) (i32.const 2))))
    (local.set $pb (local.get $b))
    (local.set $p (local.get $k))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $p)))
        (local.set $xs (f32.load (local.get $pa)))
        (local.set $x (f32x4.splat (local.get $xs)))
        (local.set $q (i32.const 0))
        (block $vec_done
          (loop $vec
            (br_if $vec_done (i32.ge_u (local.get $q) (local.get $end4)))
            (v128.store (i32.add (local.get $pc) (local.get $q))
              (f32x4.add (v128.load (i32.add (local.get $pc) (local.get $q)))
                         (f32x4.mul (local.get $x) (v128.load (i32.add (local.get $pb) (local.get $q))))))
            (local.set $q (i32.add (local.get $q) (i32.const 16)))
            (br $vec)))
        (block $rest_done
          (loop $rest
            (br_if $rest_done (i32.ge_u (local.get $q) (local.get $end)))
            (f32.store (i32.add (local.get $pc) (local.get $q))
              (f32.add (f32.load (i32.add (local.get $pc) (local.get $q)))
                       (f32.mul (local.get $xs) (f32.load (i32.add (local.get $pb) (local.get $q))))))
            (local.set $q (i32.add (local.get $q) (i32.const 4)))
            (br $rest)))
        (local.set $pa (i32.add (local.get $pa) (i32.shl (local.get $a_col) (i32.const 2))))
        (local.set $pb (i32.add (local.get $pb) (local.get $end)))
        (local.set $p (i32.sub (local.get $p) (i32.const 1)))
        (br $next))))
  ;; c[i, j] for rows i0 <= i < i1 and columns j0 <= j < n, each its own dot product
  (func $scalar
    (param $a i32) (param $b i32) (param $c i32) (param $k i32) (param $n i32) (param $a_row i32) (param $a_col i32)
    (param $i0 i32) (param $i1 i32) (param $j0 i32)
    (local $i i32) (local $j i32) (local $p i32) (local $pa i32) (local $pb i32) (local $s f32)
    (local.set $i (local.get $i0))
    (block $done
      (loop $rows
        (br_if $done (i32.ge_s (local.get $i) (local.get $i1)))
        (local.set $j (local.get $j0))
        (block $cols_done
          (loop $cols
            (br_if $cols_done (i32.ge_s (local.get $j) (local.get $n)))
            (local.set $s (f32.const 0))
            (local.set $pa (i32.add (local.get $a) (i32.shl (i32.mul (local.get $i) (local.get $a_row)) (i32.const 2))))
            (local.set $pb (i32.add (local.get $b) (i32.shl (local.get $j) (i32.const 2))))
            (local.set $p (local.get $k))
            (block $dot_done
              (loop $dot
                (br_if $dot_done (i32.eqz (local.get $p)))
                (local.set $s (f32.add (local.get $s) (f32.mul (f32.load (local.get $pa)) (f32.load (local.get $pb)))))
                (local.set $pa (i32.add (local.get $pa) (i32.shl (local.get $a_col) (i32.const 2))))
                (local.set $pb (i32.add (local.get $pb) (i32.shl (local.get $n) (i32.const 2))))
                (local.set $p (i32.sub (local.get $p) (i32.const 1)))
                (br $dot)))
            (f32.store (i32.add (local.get $c) (i32.shl (i32.add (i32.mul (local.get $i) (local.get $n)) (local.get $j)) (i32.const 2)))
                       (local.get $s))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $cols)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $rows))))

  ;; c (m x n) = A (m x k) . W^T, for W (n x k) with rows w_row floats apart: both operands are read along k, so a
  ;; weight stored as (out, in), or one head's columns of it, is used in place, each row once per two rows of A. A generated token (m = 1) streams every
  ;; weight once, four rows at a time: that walk is what decides a large model's speed.
  (func $gemm_nt (export "gemm_nt")
    (param $a i32) (param $w i32) (param $c i32) (param $m i32) (param $k i32) (param $n i32) (param $w_row i32)
    (local $i i32) (local $j i32) (local $q i32) (local $kb i32) (local $rk i32) (local $rw i32)
    (local $pa i32) (local $pa1 i32) (local $pw i32) (local $pw1 i32) (local $pw2 i32) (local $pw3 i32)
    (local $pc i32) (local $pc1 i32)
    (local $x0 v128) (local $x1 v128) (local $w0 v128) (local $w1 v128) (local $w2 v128) (local $w3 v128)
    (local $s00 v128) (local $s01 v128) (local $s02 v128) (local $s03 v128)
    (local $s10 v128) (local $s11 v128) (local $s12 v128) (local $s13 v128)
    (local.set $rk (i32.shl (local.get $k) (i32.const 2)))
    (local.set $rw (i32.shl (local.get $w_row) (i32.const 2)))
    (local.set $kb (i32.shl (i32.and (local.get $k) (i32.const -4)) (i32.const 2)))  ;; bytes of k's whole vectors
    (local.set $i (i32.const 0))
    (block $rows_done
      (loop $rows
        (br_if $rows_done (i32.gt_s (i32.add (local.get $i) (i32.const 2)) (local.get $m)))
        (local.set $pa (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $rk))))
        (local.set $pa1 (i32.add (local.get $pa) (local.get $rk)))
        (local.set $pc (i32.add (local.get $c) (i32.shl (i32.mul (local.get $i) (local.get $n)) (i32.const 2))))
        (local.set $pc1 (i32.add (local.get $pc) (i32.shl (local.get $n) (i32.const 2))))
        (local.set $j (i32.const 0))
        (block $cols_done
          (loop $cols
            (br_if $cols_done (i32.gt_s (i32.add (local.get $j) (i32.const 4)) (local.get $n)))
            (local.set $pw (i32.add (local.get $w) (i32.mul (local.get $j) (local.get $rw))))
            (local.set $pw1 (i32.add (local.get $pw) (local.get $rw)))
            (local.set $pw2 (i32.add (local.get $pw1) (local.get $rw)))
            (local.set $pw3 (i32.add (local.get $pw2) (local.get $rw)))
            (local.set $s00 (v128.const i32x4 0 0 0 0)) (local.set $s01 (v128.const i32x4 0 0 0 0))
            (local.set $s02 (v128.const i32x4 0 0 0 0)) (local.set $s03 (v128.const i32x4 0 0 0 0))
            (local.set $s10 (v128.const i32x4 0 0 0 0)) (local.set $s11 (v128.const i32x4 0 0 0 0))
            (local.set $s12 (v128.const i32x4 0 0 0 0)) (local.set $s13 (v128.const i32x4 0 0 0 0))
            (local.set $q (i32.const 0))
            (block $dot_done
              (loop $dot
                (br_if $dot_done (i32.ge_u (local.get $q) (local.get $kb)))
                (local.set $x0 (v128.load (i32.add (local.get $pa) (local.get $q))))
                (local.set $x1 (v128.load (i32.add (local.get $pa1) (local.get $q))))
                (local.set $w0 (v128.load (i32.add (local.get $pw) (local.get $q))))
                (local.set $w1 (v128.load (i32.add (local.get $pw1) (local.get $q))))
                (local.set $w2 (v128.load (i32.add (local.get $pw2) (local.get $q))))
                (local.set $w3 (v128.load (i32.add (local.get $pw3) (local.get $q))))
                (local.set $s00 (f32x4.add (local.get $s00) (f32x4.mul (local.get $x0) (local.get $w0))))
                (local.set $s01 (f32x4.add (local.get $s01) (f32x4.mul (local.get $x0) (local.get $w1))))
                (local.set $s02 (f32x4.add (local.get $s02) (f32x4.mul (local.get $x0) (local.get $w2))))
                (local.set $s03 (f32x4.add (local.get $s03) (f32x4.mul (local.get $x0) (local.get $w3))))
                (local.set $s10 (f32x4.add (local.get $s10) (f32x4.mul (local.get $x1) (local.get $w0))))
                (local.set $s11 (f32x4.add (local.get $s11) (f32x4.mul (local.get $x1) (local.get $w1))))
                (local.set $s12 (f32x4.add (local.get $s12) (f32x4.mul (local.get $x1) (local.get $w2))))
                (local.set $s13 (f32x4.add (local.get $s13) (f32x4.mul (local.get $x1) (local.get $w3))))
                (local.set $q (i32.add (local.get $q) (i32.const 16)))
                (br $dot)))
            (f32.store (local.get $pc)
              (f32.add (call $sum (local.get $s00)) (call $tail (local.get $pa) (local.get $pw) (local.get $kb) (local.get $rk))))
            (f32.store offset=4 (local.get $pc)
              (f32.add (call $sum (local.get $s01)) (call $tail (local.get $pa) (local.get $pw1) (local.get $kb) (local.get $rk))))
            (f32.store offset=8 (local.get $pc)
              (f32.add (call $sum (local.get $s02)) (call $tail (local.get $pa) (local.get $pw2) (local.get $kb) (local.get $rk))))
            (f32.store offset=12 (local.get $pc)
              (f32.add (call $sum (local.get $s03)) (call $tail (local.get $pa) (local.get $pw3) (local.get $kb) (local.get $rk))))
            (f32.store (local.get $pc1)
              (f32.add (call $sum (local.get $s10)) (call $tail (local.get $pa1) (local.get $pw) (local.get $kb) (local.get $rk))))
            (f32.store offset=4 (local.get $pc1)
              (f32.add (call $sum (local.get $s11)) (call $tail (local.get $pa1) (local.get $pw1) (local.get $kb) (local.get $rk))))
            (f32.store offset=8 (local.get $pc1)
              (f32.add (call $sum (local.get $s12)) (call $tail (local.get $pa1) (local.get $pw2) (local.get $kb) (local.get $rk))))
            (f32.store offset=12 (local.get $pc1)
              (f32.add (call $sum (local.get $s13)) (call $tail (local.get $pa1) (local.get $pw3) (local.get $kb) (local.get $rk))))
            (local.set $pc (i32.add (local.get $pc) (i32.const 16)))
            (local.set $pc1 (i32.add (local.get $pc1) (i32.const 16)))
            (local.set $j (i32.add (local.get $j) (i32.const 4)))
            (br $cols)))
        ;; the columns past the last block of 4, one dot product each
        (block $rest_done
          (loop $rest
            (br_if $rest_done (i32.ge_s (local.get $j) (local.get $n)))
            (local.set $pw (i32.add (local.get $w) (i32.mul (local.get $j) (local.get $rw))))
            (f32.store (local.get $pc) (call $dot (local.get $pa) (local.get $pw) (local.get $kb) (local.get $rk)))
            (f32.store (local.get $pc1) (call $dot (local.get $pa1) (local.get $pw) (local.get $kb) (local.get $rk)))
            (local.set $pc (i32.add (local.get $pc) (i32.const 4)))
            (local.set $pc1 (i32.add (local.get $pc1) (i32.const 4)))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $rest)))
        (local.set $i (i32.add (local.get $i) (i32.const 2)))
        (br $rows)))
    ;; the last row when m is odd (a generated token's only row): four rows of W at a time
    (if (i32.lt_s (local.get $i) (local.get $m))
      (then
        (local.set $pa (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $rk))))
        (local.set $pc (i32.add (local.get $c) (i32.shl (i32.mul (local.get $i) (local.get $n)) (i32.const 2))))
        (local.set $j (i32.const 0))
        (block $cols_done
          (loop $cols
            (br_if $cols_done (i32.gt_s (i32.add (local.get $j) (i32.const 4)) (local.get $n)))
            (local.set $pw (i32.add (local.get $w) (i32.mul (local.get $j) (local.get $rw))))
            (local.set $pw1 (i32.add (local.get $pw) (local.get $rw)))
            (local.set $pw2 (i32.add (local.get $pw1) (local.get $rw)))
            (local.set $pw3 (i32.add (local.get $pw2) (local.get $rw)))
            (local.set $s00 (v128.const i32x4 0 0 0 0)) (local.set $s01 (v128.const i32x4 0 0 0 0))
            (local.set $s02 (v128.const i32x4 0 0 0 0)) (local.set $s03 (v128.const i32x4 0 0 0 0))
            (local.set $q (i32.const 0))
            (block $dot_done
              (loop $dot
                (br_if $dot_done (i32.ge_u (local.get $q) (local.get $kb)))
                (local.set $x0 (v128.load (i32.add (local.get $pa) (local.get $q))))
                (local.set $s00 (f32x4.add (local.get $s00) (f32x4.mul (local.get $x0) (v128.load (i32.add (local.get $pw) (local.get $q))))))
                (local.set $s01 (f32x4.add (local.get $s01) (f32x4.mul (local.get $x0) (v128.load (i32.add (local.get $pw1) (local.get $q))))))
                (local.set $s02 (f32x4.add (local.get $s02) (f32x4.mul (local.get $x0) (v128.load (i32.add (local.get $pw2) (local.get $q))))))
                (local.set $s03 (f32x4.add (local.get $s03) (f32x4.mul (local.get $x0) (v128.load (i32.add (local.get $pw3) (local.get $q))))))
                (local.set $q (i32.add (local.get $q) (i32.const 16)))
                (br $dot)))
            (f32.store (local.get $pc)
              (f32.add (call $sum (local.get $s00)) (call $tail (local.get $pa) (local.get $pw) (local.get $kb) (local.get $rk))))
            (f32.store offset=4 (local.get $pc)
              (f32.add (call $sum (local.get $s01)) (call $tail (local.get $pa) (local.get $pw1) (local.get $kb) (local.get $rk))))
            (f32.store offset=8 (local.get $pc)
              (f32.add (call $sum (local.get $s02)) (call $tail (local.get $pa) (local.get $pw2) (local.get $kb) (local.get $rk))))
            (f32.store offset=12 (local.get $pc)
              (f32.add (call $sum (local.get $s03)) (call $tail (local.get $pa) (local.get $pw3) (local.get $kb) (local.get $rk))))
            (local.set $pc (i32.add (local.get $pc) (i32.const 16)))
            (local.set $j (i32.add (local.get $j) (i32.const 4)))
            (br $cols)))
        (block $rest_done
          (loop $rest
            (br_if $rest_done (i32.ge_s (local.get $j) (local.get $n)))
            (f32.store (local.get $pc) (call $dot (local.get $pa) (i32.add (local.get $w) (i32.mul (local.get $j) (local.get $rw)))
                                                  (local.get $kb) (local.get $rk)))
            (local.set $pc (i32.add (local.get $pc) (i32.const 4)))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $rest))))))
  ;; the four lanes of v added
  (func $sum (param $v v128) (result f32)
    (f32.add (f32.add (f32x4.extract_lane 0 (local.get $v)) (f32x4.extract_lane 1 (local.get $v)))
             (f32.add (f32x4.extract_lane 2 (local.get $v)) (f32x4.extract_lane 3 (local.get $v)))))
  ;; sum of x[q] y[q] over the bytes from <= q < to, one float at a time (k's last k mod 4)
  (func $tail (param $x i32) (param $y i32) (param $from i32) (param $to i32) (result f32)
    (local $s f32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $from) (local.get $to)))
        (local.set $s (f32.add (local.get $s) (f32.mul (f32.load (i32.add (local.get $x) (local.get $from)))
                                                       (f32.load (i32.add (local.get $y) (local.get $from))))))
        (local.set $from (i32.add (local.get $from) (i32.const 4)))
        (br $next)))
    (local.get $s))
  ;; the dot product of x and y, kb bytes of whole vectors then the rest up to rk bytes
  (func $dot (param $x i32) (param $y i32) (param $kb i32) (param $rk i32) (result f32)
    (local $q i32) (local $s v128)
    (local.set $s (v128.const i32x4 0 0 0 0))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $q) (local.get $kb)))
        (local.set $s (f32x4.add (local.get $s) (f32x4.mul (v128.load (i32.add (local.get $x) (local.get $q)))
                                                           (v128.load (i32.add (local.get $y) (local.get $q))))))
        (local.set $q (i32.add (local.get $q) (i32.const 16)))
        (br $next)))
    (f32.add (call $sum (local.get $s)) (call $tail (local.get $x) (local.get $y) (local.get $kb) (local.get $rk))))
)
