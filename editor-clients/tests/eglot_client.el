;;; eglot_client.el --- moelsp driven by Emacs' eglot, in batch mode  -*- lexical-binding: t -*-
;; emacs -q --batch -l eglot_client.el (-q, not -Q: Debian's site-start loads elpa-eglot), with MOELSP_BINARY and MOELSP_TEST_DATA set.
;; Initializes, opens a Python buffer, asks for a completion, shuts down.
;; Exits 0 on success, 1 on failure.
(require 'eglot)
(require 'python)

(defun moelsp-test-fail (fmt &rest args)
  (princ (concat "eglot client test FAILED: " (apply #'format fmt args) "\n") #'external-debugging-output)
  (kill-emacs 1))

(let* ((binary (getenv "MOELSP_BINARY"))
       (data (getenv "MOELSP_TEST_DATA"))
       (dir (make-temp-file "moelsp-eglot" t))
       (file (expand-file-name "area.py" dir)))
  (unless (and binary data) (moelsp-test-fail "MOELSP_BINARY and MOELSP_TEST_DATA must be set"))
  (with-temp-file file (insert "def area(w, h):\n    return "))
  (setq eglot-server-programs
        `((python-mode . (,binary "lsp" "--model" ,(expand-file-name "reference/qwen3moe-ref.gguf" data)
                                  "--threads" "2" "--context-size" "1024" "--completion-max-tokens" "8"))))
  (setq eglot-sync-connect t eglot-connect-timeout 30)
  (condition-case err
      (with-current-buffer (find-file-noselect file)
        (python-mode)
        ;; eglot-ensure would connect after the next command, which never comes in batch
        ;; mode: connect now, synchronously, as M-x eglot does.
        (apply #'eglot (eglot--guess-contact))
        (let ((server (eglot-current-server)))
          (unless server (moelsp-test-fail "no eglot server"))
          (unless (eglot--server-capable :completionProvider) (moelsp-test-fail "no completionProvider"))
          ;; the model loads in the background: poll moelsp/status until ready
          (let ((deadline (+ (float-time) 30)) (state nil))
            (while (and (not (equal state "ready")) (< (float-time) deadline))
              (setq state (plist-get (jsonrpc-request server :moelsp/status nil) :state))
              (unless (equal state "ready") (sleep-for 0.1)))
            (unless (equal state "ready") (moelsp-test-fail "model not ready: %S" state)))
          (goto-char (point-max))
          (let* ((result (jsonrpc-request server :textDocument/completion (eglot--TextDocumentPositionParams)
                                          :timeout 30))
                 (items (plist-get result :items)))
            (unless (vectorp items) (moelsp-test-fail "completion result has no items vector: %S" result))
            (mapc (lambda (item)
                    (unless (and (stringp (plist-get item :label)) (> (length (plist-get item :label)) 0))
                      (moelsp-test-fail "completion item without a label: %S" item)))
                  items))
          (eglot-shutdown server)))
    (error (moelsp-test-fail "%S" err)))
  (princ "eglot client test passed\n")
  (kill-emacs 0))
