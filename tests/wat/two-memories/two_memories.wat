;; The core module of the `two-memories` fixture (see ../README.md).
;;
;; `call` takes the flattened `input` record (one u32: pages) and returns a
;; pointer to its result: `ok(output { report: "" })`, laid out as a zero
;; discriminant and an empty string, which zeroed memory already is.
(module
  (memory (export "memory") 1)
  (memory $second 1)
  (func (export "call") (param $pages i32) (result i32)
    ;; A refused growth returns -1: trap, as a Rust allocator would abort.
    (if (i32.eq (memory.grow 0 (local.get $pages)) (i32.const -1))
      (then unreachable))
    (if (i32.eq (memory.grow $second (local.get $pages)) (i32.const -1))
      (then unreachable))
    ;; Touch the second memory's last page, so that it is really used.
    (i32.store8 $second
      (i32.sub (i32.mul (memory.size $second) (i32.const 65536)) (i32.const 1))
      (i32.const 1))
    (i32.const 16)))
