;; slm's matrix product for Pyodide (py/slm/matmul.py), whose NumPy has no BLAS and no SIMD: 128-bit SIMD
;; over four rows and eight columns of the output at a time. sitebuild/kernels.py assembles it and makes it a side
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
    ;; the rows past the last block of 4: one row at a time, 8 columns at a time
    (block $tail_done
      (loop $tail
        (br_if $tail_done (i32.ge_s (local.get $i) (local.get $m)))
        (local.set $j (i32.const 0))
        (block $cols_done
          (loop $cols
            (br_if $cols_done (i32.gt_s (i32.add (local.get $j) (i32.const 8)) (local.get $n)))
            (local.set $c00 (v128.const i32x4 0 0 0 0)) (local.set $c01 (v128.const i32x4 0 0 0 0))
            (local.set $pa (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $ra))))
            (local.set $pb (i32.add (local.get $b) (i32.shl (local.get $j) (i32.const 2))))
            (local.set $p (local.get $k))
            (block $dot_done
              (loop $dot
                (br_if $dot_done (i32.eqz (local.get $p)))
                (local.set $x (f32x4.splat (f32.load (local.get $pa))))
                (local.set $c00 (f32x4.add (local.get $c00) (f32x4.mul (local.get $x) (v128.load (local.get $pb)))))
                (local.set $c01 (f32x4.add (local.get $c01) (f32x4.mul (local.get $x) (v128.load offset=16 (local.get $pb)))))
                (local.set $pa (i32.add (local.get $pa) (local.get $da)))
                (local.set $pb (i32.add (local.get $pb) (local.get $rb)))
                (local.set $p (i32.sub (local.get $p) (i32.const 1)))
                (br $dot)))
            (local.set $pc (i32.add (local.get $c) (i32.shl (i32.add (i32.mul (local.get $i) (local.get $n)) (local.get $j)) (i32.const 2))))
            (v128.store (local.get $pc) (local.get $c00))
            (v128.store offset=16 (local.get $pc) (local.get $c01))
            (local.set $j (i32.add (local.get $j) (i32.const 8)))
            (br $cols)))
        (call $scalar (local.get $a) (local.get $b) (local.get $c) (local.get $k) (local.get $n) (local.get $a_row)
              (local.get $a_col) (local.get $i) (i32.add (local.get $i) (i32.const 1)) (local.get $j))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $tail))))
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
)
