;;; moelsp_el_test.el --- batch test of editor-clients/emacs/ (moelsp.el)  -*- lexical-binding: t -*-
;;
;;   MOELSP_BINARY=$PWD/build/cli/moelsp emacs -q --batch -l editor-clients/tests/moelsp_el_test.el
;;
;; (-q, not -Q: Debian's site-start loads elpa-eglot.)  Uses the embedded default
;; model (no model setting; XDG_CONFIG_HOME and MOELSP_MODEL are cleared for the
;; servers).  Byte-compiles the package's files (moelsp.el, moelsp-ghost.el,
;; moelsp-chat.el) into a temporary directory (any warning fails) and loads them
;; from there with (require 'moelsp); starts eglot on a Python buffer with `moelsp lsp' as
;; the user's own server, then moelsp-mode next to it: waits for "ready" in the
;; mode line; types, gets a ghost-text suggestion equal to the server's;
;; typing its first character keeps the rest; dismisses it (point motion, C-g);
;; accepts a word (M-f), then the rest (TAB); streams a chat answer, a
;; follow-up, an explanation and documentation (of a buffer the server does not
;; have open) into *moelsp-chat*, the commands under their labels with the
;; server's question kept for follow-ups; checks that moelsp-status shows the
;; server's texts (summaryLine, summary) and the telemetry; checks the server's copy of the document (rebuilt from the
;; didOpen/didChange messages sent, UTF-16 columns) equals the buffer; checks
;; eglot still manages the buffer, and shuts both servers down.  Exits 0 on success, 1 with a message on failure;
;; gives up after 120 s.
(require 'cl-lib)
(require 'bytecomp)
(require 'loadhist)

(defvar moelsp-test--t0 (float-time))

(defun moelsp-test-log (fmt &rest args)
  (princ (format "[%5.1fs] %s\n" (- (float-time) moelsp-test--t0) (apply #'format fmt args))
         #'external-debugging-output))

(defun moelsp-test-fail (fmt &rest args)
  (princ (concat "moelsp.el test FAILED: " (apply #'format fmt args) "\n") #'external-debugging-output)
  (when (get-buffer "*moelsp-log*")
    (princ (concat "---- *moelsp-log* (tail) ----\n"
                   (with-current-buffer "*moelsp-log*"
                     (buffer-substring-no-properties (max (point-min) (- (point-max) 3000)) (point-max)))
                   "\n")
           #'external-debugging-output))
  (kill-emacs 1))

(defmacro moelsp-test-check (form fmt &rest args)
  `(unless ,form (moelsp-test-fail ,fmt ,@args)))

(defun moelsp-test-wait (pred seconds what)
  "Process events until PRED is non-nil, at most SECONDS; fail naming WHAT."
  (let ((deadline (+ (float-time) seconds)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (or (funcall pred) (moelsp-test-fail "%s: not within %s s" what seconds))))

;; Never hang: timers run while the test waits for the servers.
(run-with-timer 120 nil (lambda () (moelsp-test-fail "the test ran over 120 s")))

(defvar moelsp-test--dir (file-name-directory (or load-file-name buffer-file-name)))
(defvar moelsp-test--binary (getenv "MOELSP_BINARY"))
(moelsp-test-check (and moelsp-test--binary (file-executable-p moelsp-test--binary))
                   "MOELSP_BINARY must name the moelsp binary (got %S)" moelsp-test--binary)

;; 1. Byte-compile the package's files without warnings, outside the source tree,
;; and load the result as a user would: the folder on `load-path', (require 'moelsp).
;; moelsp.el requires the others, so they are compiled first and it loads their .elc.
(defvar moelsp-test--tmp (make-temp-file "moelsp-el-test" t))
;; A model cache with one model in it (step 9b), and no hub to ask.
(let ((models (expand-file-name "models/acme/Tiny-GGUF/" moelsp-test--tmp)))
  (make-directory models t)
  (copy-file (expand-file-name "../../models/moelsp-default.gguf" moelsp-test--dir)
             (expand-file-name "tiny-Q8_0.gguf" models))
  (setenv "MOELSP_MODELS_DIR" (expand-file-name "models" moelsp-test--tmp))
  (setenv "HF_ENDPOINT" "http://127.0.0.1:9"))
(let* ((src-dir (expand-file-name "../emacs/" moelsp-test--dir))
       (files (sort (directory-files src-dir nil "\\`moelsp.*\\.el\\'")
                    (lambda (a b) (and (not (equal a "moelsp.el")) (or (equal b "moelsp.el") (string< a b))))))
       (byte-compile-error-on-warn t))
  (moelsp-test-check (member "moelsp.el" files) "no moelsp.el in %s" src-dir)
  (push moelsp-test--tmp load-path)
  (dolist (file files)
    (copy-file (expand-file-name file src-dir) (expand-file-name file moelsp-test--tmp) t))
  (dolist (file files)
    (moelsp-test-check (byte-compile-file (expand-file-name file moelsp-test--tmp))
                       "%s does not byte-compile cleanly (see above)" file))
  (require 'moelsp)
  (dolist (file files)
    (let ((feature (intern (file-name-sans-extension file))))
      (moelsp-test-check (and (featurep feature)
                              (string-suffix-p ".elc" (or (feature-file feature) "")))
                         "%s was not loaded from its .elc (%S)" file (feature-file feature))))
  (moelsp-test-log "byte-compiled %s without warnings; (require 'moelsp) loaded them"
                   (mapconcat #'identity files ", ")))

(require 'eglot)
(require 'python)

(defun moelsp-test-command (key)
  "Run what KEY runs in the current buffer as the command loop would; return the command."
  (let ((cmd (key-binding (kbd key) t)))
    (setq this-command cmd last-command-event (aref (kbd key) 0))
    (run-hooks 'pre-command-hook)
    (call-interactively cmd)
    (run-hooks 'post-command-hook)
    (setq last-command this-command)
    cmd))

(defun moelsp-test-type (string)
  "Type STRING, one self-inserting command per character."
  (dolist (c (string-to-list string))
    (setq this-command 'self-insert-command last-command-event c)
    (run-hooks 'pre-command-hook)
    (self-insert-command 1 c)
    (run-hooks 'post-command-hook)))

(defun moelsp-test-overlay-text ()
  (and moelsp--overlay (substring-no-properties (overlay-get moelsp--overlay 'after-string))))

(defun moelsp-test-suggest ()
  "Wait for a suggestion after typing; ask explicitly when the automatic one is empty.
Return its text, or nil when there is none."
  (moelsp-test-wait (lambda () (or moelsp--overlay
                                   (and (not moelsp--inflight) (not moelsp--completion-timer))))
                    30 "an automatic suggestion request to finish")
  (unless moelsp--overlay
    (moelsp-test-log "no automatic suggestion here; asking explicitly (triggerKind 1)")
    (moelsp-complete)
    (moelsp-test-wait (lambda () (or moelsp--overlay (not moelsp--inflight))) 30 "an invoked suggestion"))
  (moelsp-test-overlay-text))

(defconst moelsp-test--head
  (concat "import math\n\n\ndef area(width, height):\n"
          "    \"\"\"Return the area of a rectangle.\"\"\"\n"
          "    return width * height\n\n\n"))

;; Places to type at, in order: the first whose suggestion has two words or more
;; is the one the test accepts (the embedded model is small; the server drops
;; degenerate text, so some places get nothing).
(defconst moelsp-test--candidates
  '(("def circle_area(radius):\n    " . "return ")
    ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n        " . "self")
    ("def perimeter(width, height):\n    " . "return ")
    ("def main():\n    " . "for ")))

(defun moelsp-test-find-suggestion ()
  "Type at each candidate place until a suggestion of two words or more shows; return it."
  (cl-loop for (text . typed) in moelsp-test--candidates
           do (progn
                (moelsp-dismiss)
                (erase-buffer)
                (insert moelsp-test--head text)
                (setq moelsp--last-tick (buffer-chars-modified-tick))
                (goto-char (point-max))
                (moelsp-test-type typed))
           for shown = (moelsp-test-suggest)
           do (moelsp-test-log "typed %S after %S: suggestion %S" typed
                               (car (last (split-string text "\n"))) shown)
           when (and shown (string-match-p "\\`\\W*\\w+\\W+\\w" shown)) return shown
           finally (moelsp-test-fail "no place gave a suggestion of two words or more")))

;; The server's copy of the document, rebuilt from what moelsp.el sends it
;; (didOpen, then each didChange's ranges in UTF-16 units, applied as the server does).
(defvar moelsp-test--shadow nil)

(defun moelsp-test--offset (text pos)
  (let ((i 0) (units (plist-get pos :character)))
    (dotimes (_ (plist-get pos :line))
      (setq i (let ((nl (string-search "\n" text i))) (if nl (1+ nl) (length text)))))
    (while (and (> units 0) (< i (length text)) (/= (aref text i) ?\n))
      (setq units (- units (if (> (aref text i) #xFFFF) 2 1)) i (1+ i)))
    i))

(advice-add 'jsonrpc-notify :before
            (lambda (conn method params)
              (when (cl-typep conn 'moelsp-connection)
                (pcase method
                  (:textDocument/didOpen
                   (setq moelsp-test--shadow (plist-get (plist-get params :textDocument) :text)))
                  (:textDocument/didChange
                   (dolist (c (append (plist-get params :contentChanges) nil))
                     (let ((range (plist-get c :range)) (text moelsp-test--shadow))
                       (setq moelsp-test--shadow
                             (if (not range)
                                 (plist-get c :text)
                               (let ((a (moelsp-test--offset text (plist-get range :start)))
                                     (b (moelsp-test--offset text (plist-get range :end))))
                                 (concat (substring text 0 a) (plist-get c :text) (substring text b))))))))))))

(defvar moelsp-test--stream-updates 0)
(advice-add 'moelsp--chat-stream :before
            (lambda (_buf text) (when (and (stringp text) (> (length text) 0))
                                  (cl-incf moelsp-test--stream-updates))))
(defvar moelsp-test--answers nil)
(add-hook 'moelsp-chat-answer-functions (lambda (text) (push text moelsp-test--answers)))
;; The last chat result's `question' (the commands' turn as the server asked it).
(defvar moelsp-test--question nil)
(advice-add 'moelsp--chat-done :before
            (lambda (_buf _conn _token _question result _err)
              (setq moelsp-test--question (plist-get result :question))))

(defun moelsp-test-last-question ()
  "The user's turn of the conversation's last exchange."
  (plist-get (car (last (buffer-local-value 'moelsp-chat--messages (get-buffer "*moelsp-chat*")) 2))
             :content))

(defun moelsp-test-chat (what thunk)
  "Run THUNK, which asks moelsp something; check the answer streamed into the chat buffer."
  (setq moelsp-test--stream-updates 0 moelsp-test--answers nil moelsp-test--question nil)
  (let ((chat (funcall thunk)))
    (moelsp-test-check (bufferp chat) "%s: no chat buffer" what)
    (moelsp-test-wait (lambda () (not (buffer-local-value 'moelsp-chat--pending chat))) 60
                      (format "%s: the answer" what))
    (let ((text (with-current-buffer chat (buffer-substring-no-properties (point-min) (point-max)))))
      (moelsp-test-check (= (length moelsp-test--answers) 1)
                         "%s: no complete answer; the chat buffer reads:\n%s" what text)
      (moelsp-test-check (> (length (string-trim (car moelsp-test--answers))) 0) "%s: empty answer" what)
      (moelsp-test-check (> moelsp-test--stream-updates 1)
                         "%s: the answer came in %d update(s), expected a stream" what moelsp-test--stream-updates)
      (moelsp-test-check (string-search (car moelsp-test--answers) text)
                         "%s: the chat buffer lacks the answer %S" what (car moelsp-test--answers))
      (moelsp-test-check (string-match-p "^\\[\\(eos\\|stop\\|length\\|timeout\\)" text)
                         "%s: no footer with the finish reason:\n%s" what text)
      (moelsp-test-log "%s: %d streamed updates, answer %S" what moelsp-test--stream-updates
                       (truncate-string-to-width (car moelsp-test--answers) 60 nil nil "..."))
      text)))

(condition-case err
    (let* ((file (expand-file-name "shapes.py" moelsp-test--tmp))
           (process-environment (copy-sequence process-environment))
           buf eglot-server conn)
      ;; The embedded default model: no user config file, no MOELSP_MODEL.
      (setenv "XDG_CONFIG_HOME" (expand-file-name "config" moelsp-test--tmp))
      (setenv "MOELSP_MODEL" nil)
      (with-temp-file file (insert moelsp-test--head))
      (setq buf (find-file-noselect file))
      (set-buffer buf)
      (switch-to-buffer buf)
      (moelsp-test-check (derived-mode-p 'python-mode) "not in python-mode: %s" major-mode)

      ;; 2. The user's own LSP server under eglot (here moelsp too, a second process).
      (setq eglot-server-programs `((python-mode . (,moelsp-test--binary "lsp")))
            eglot-sync-connect t eglot-connect-timeout 30)
      (apply #'eglot (eglot--guess-contact))
      (setq eglot-server (eglot-current-server))
      (moelsp-test-check eglot-server "eglot did not start")
      (moelsp-test-log "eglot manages the buffer")

      ;; 3. moelsp-mode next to it, with its own process.
      ;; No model setting (the embedded model); answers capped so a loaded machine stays in time.
      (setq moelsp-command moelsp-test--binary moelsp-idle-delay 0.1
            moelsp-initialization-options '(:chat (:maxTokens 160)))
      (moelsp-mode 1)
      (moelsp-test-check moelsp-mode "moelsp-mode did not turn on")
      (setq conn moelsp--connection)
      (moelsp-test-check (moelsp--live-p conn) "no moelsp connection")
      (moelsp-test-check (not (eq (jsonrpc--process conn) (jsonrpc--process eglot-server)))
                         "moelsp shares eglot's process")
      (moelsp-test-check (and (eglot-managed-p) (eq (eglot-current-server) eglot-server)
                              (jsonrpc-running-p eglot-server))
                         "eglot no longer manages the buffer after moelsp-mode")
      (let ((lighter (cadr (assq 'moelsp-mode minor-mode-alist))))
        (moelsp-test-check (equal lighter '(:eval (moelsp-mode-line-string)))
                           "unexpected lighter %S" lighter)
        (moelsp-test-wait (lambda () (equal (eval (cadr lighter) t) " Moe")) 60
                          (format "the mode line to show \" Moe\" (ready); it shows %S, state %S"
                                  (eval (cadr lighter) t) (moelsp--state conn))))
      (moelsp-test-log "moelsp ready; mode line %S" (substring-no-properties (moelsp-mode-line-string)))

      ;; 4. Type; a suggestion shows after the idle delay and equals the server's.
      (let* ((shown (moelsp-test-find-suggestion))
             (start (point))
             (server (jsonrpc-request conn :textDocument/inlineCompletion
                                      (list :textDocument (list :uri moelsp--uri)
                                            :position (moelsp--pos-to-lsp)
                                            :context (list :triggerKind 2))
                                      :timeout 30))
             (item (aref (plist-get server :items) 0)))
        (moelsp-test-log "suggestion at %S: %S" (moelsp--pos-to-lsp) shown)
        (moelsp-test-check (equal shown (plist-get item :insertText))
                           "the overlay shows %S, the server suggests %S" shown (plist-get item :insertText))
        (moelsp-test-check (equal shown (moelsp-suggestion)) "moelsp-suggestion disagrees with the overlay")
        (moelsp-test-check (= (overlay-start moelsp--overlay) (point)) "the overlay is not at point")
        (moelsp-test-check (eq (key-binding (kbd "TAB")) 'moelsp-accept)
                           "TAB runs %S while a suggestion shows" (key-binding (kbd "TAB")))

        ;; 5. Dismissed by moving point, and by C-g.
        (setq this-command 'backward-char)
        (backward-char)
        (run-hooks 'post-command-hook)
        (moelsp-test-check (null moelsp--overlay) "moving point did not dismiss the suggestion")
        (moelsp-test-check (not (eq (key-binding (kbd "TAB")) 'moelsp-accept))
                           "TAB still accepts without a suggestion")
        (setq this-command 'forward-char)
        (forward-char)
        (run-hooks 'post-command-hook)
        (moelsp-complete)
        (moelsp-test-wait (lambda () (or moelsp--overlay (not moelsp--inflight))) 30 "the suggestion again")
        (moelsp-test-check (equal (moelsp-test-overlay-text) shown)
                           "asked again, got %S instead of %S" (moelsp-test-overlay-text) shown)
        ;; Typing the suggestion's first character keeps the rest.
        (moelsp-test-type (substring shown 0 1))
        (moelsp-test-check (equal (moelsp-test-overlay-text) (substring shown 1))
                           "typed %S: the overlay shows %S" (substring shown 0 1) (moelsp-test-overlay-text))
        (moelsp-test-check (eq (moelsp-test-command "C-g") 'moelsp-dismiss) "C-g does not dismiss")
        (moelsp-test-check (null moelsp--overlay) "C-g left the suggestion")
        (setq this-command 'delete-backward-char)
        (delete-char -1)
        (run-hooks 'post-command-hook)
        (moelsp-test-check (= (point) start) "lost the place")
        (moelsp-test-log "typing through kept the rest; dismissed by point motion and by C-g")

        ;; 6. M-f accepts the first word, TAB the rest.
        (moelsp-complete)
        (moelsp-test-wait (lambda () (or moelsp--overlay (not moelsp--inflight))) 30 "the suggestion again")
        (moelsp-test-check (equal (moelsp-test-overlay-text) shown) "the suggestion changed")
        (moelsp-test-check (eq (moelsp-test-command "M-f") 'moelsp-accept-word) "M-f does not accept a word")
        (let ((word (buffer-substring-no-properties start (point))))
          (moelsp-test-check (and (> (length word) 0) (string-prefix-p word shown))
                             "M-f inserted %S, not the start of %S" word shown)
          (moelsp-test-check (string-match-p "\\`\\W*\\w+\\'" word) "M-f inserted %S, not one word" word)
          (moelsp-test-check (equal (moelsp-test-overlay-text) (substring shown (length word)))
                             "after M-f the overlay shows %S, not %S"
                             (moelsp-test-overlay-text) (substring shown (length word)))
          (moelsp-test-log "M-f inserted %S; still shown %S" word (moelsp-test-overlay-text)))
        (moelsp-test-check (eq (moelsp-test-command "TAB") 'moelsp-accept) "TAB does not accept")
        (moelsp-test-check (equal (buffer-substring-no-properties start (point)) shown)
                           "after TAB the buffer has %S, not %S"
                           (buffer-substring-no-properties start (point)) shown)
        (moelsp-test-check (null moelsp--overlay) "the suggestion still shows after TAB")
        (moelsp-test-log "TAB inserted the rest"))
      ;; Let the next automatic request (after the accept) finish; then nothing is pending.
      (moelsp-test-wait (lambda () (and (not moelsp--completion-timer) (not moelsp--inflight)
                                        (= (moelsp--pending conn) 0)))
                        30 "the requests to finish")
      (moelsp-dismiss)

      ;; 7. Chat: a question, then a follow-up that carries the conversation.
      (moelsp-test-chat "moelsp-chat"
                        (lambda () (moelsp-chat "Write a Python function that adds two numbers.")))
      (moelsp-test-chat "follow-up" (lambda () (moelsp-chat "Now make it subtract them instead.")))
      (moelsp-test-check (= (length (buffer-local-value 'moelsp-chat--messages (get-buffer "*moelsp-chat*"))) 4)
                         "the conversation does not have two turns: %S"
                         (buffer-local-value 'moelsp-chat--messages (get-buffer "*moelsp-chat*")))
      ;; moelsp.explain on the first function (workspace/executeCommand, work-done progress).
      ;; The chat buffer heads the turn with a label; the question is the
      ;; server's, and the conversation keeps it as asked (the result's
      ;; `question': its wording and the code) for the follow-ups.
      (let* ((end (save-excursion (goto-char (point-min)) (search-forward "height\n")))
             (code (buffer-substring-no-properties (point-min) end))
             (text (moelsp-test-chat "moelsp-explain" (lambda () (moelsp-explain (point-min) end))))
             (asked (moelsp-test-last-question)))
        (moelsp-test-check (string-match-p "^## You\nExplain\n(shapes\\.py, lines 1-6)\n" text)
                           "the explanation's heading is missing:\n%s" text)
        (moelsp-test-check (and (stringp moelsp-test--question)
                                (string-suffix-p (concat "\n\n```python\n" (string-trim-right code) "\n```")
                                                 moelsp-test--question))
                           "the result's question is not the code in a python fence: %S" moelsp-test--question)
        (moelsp-test-check (equal asked moelsp-test--question)
                           "the conversation keeps %S, not the server's question %S" asked moelsp-test--question)
        (moelsp-test-log "moelsp-explain: heading \"Explain\", the conversation keeps the server's question %S"
                         (car (split-string asked "\n"))))
      ;; moelsp-document on a buffer the server does not have open: moelsp/chat
      ;; with kind and the code; the server's question is kept the same way.
      (let* ((code "def add(a, b):\n    return a + b\n")
             (text (with-temp-buffer
                     (python-mode)
                     (insert code)
                     (moelsp-test-chat "moelsp-document (not open)"
                                       (lambda () (moelsp-document (point-min) (point-max))))))
             (asked (moelsp-test-last-question)))
        (moelsp-test-check (string-match-p "^## You\nDocument\n(.*, lines 1-2)\n" text)
                           "the documentation's heading is missing:\n%s" text)
        (moelsp-test-check (and (stringp moelsp-test--question)
                                (string-suffix-p "\n\n```python\ndef add(a, b):\n    return a + b\n```"
                                                 moelsp-test--question)
                                (equal asked moelsp-test--question))
                           "moelsp/chat's question %S, kept %S" moelsp-test--question asked)
        (moelsp-test-log "moelsp-document (not open): moelsp/chat with the code; question kept"))

      ;; 8. moelsp-status reports ready, and the telemetry counted what happened.
      ;; What it echoes is the server's line (summaryLine) and the root; the
      ;; verbose buffer the server's text (summary), then the fields.
      (let* ((echoed nil)
             (status (cl-letf* ((real (symbol-function 'message))
                                ((symbol-function 'message)
                                 (lambda (fmt &rest args) (setq echoed (apply #'format fmt args))
                                   (apply real fmt args))))
                       (moelsp-status)))
             (completions (plist-get status :completions))
             (line (plist-get status :summaryLine))
             (summary (plist-get status :summary)))
        (moelsp-test-check (equal (plist-get status :state) "ready") "moelsp-status: %S" (plist-get status :state))
        (moelsp-test-check (and (stringp line) (string-prefix-p "moelsp ready" line)) "summaryLine: %S" line)
        (moelsp-test-check (equal echoed (concat line " — " (abbreviate-file-name (moelsp--root conn))))
                           "moelsp-status echoed %S, not the server's line %S and the root" echoed line)
        (moelsp-status t)
        (let ((shown (with-current-buffer "*moelsp-status*" (buffer-string))))
          (moelsp-test-check (and (stringp summary) (string-search summary shown)
                                  (string-search "\n## fields (JSON)\n" shown)
                                  (string-search "\"completions\"" shown)
                                  (not (string-search "\"summaryLine\"" shown)))
                             "the *moelsp-status* buffer lacks the server's summary or the fields:\n%s" shown))
        (moelsp-test-check (equal (moelsp-mode-line-string) " Moe") "the mode line shows %S"
                           (moelsp-mode-line-string))
        (moelsp-test-check (>= (plist-get completions :shown) 3) "shown: %S" completions)
        (moelsp-test-check (>= (plist-get completions :accepted) 1) "accepted: %S" completions)
        (moelsp-test-check (>= (plist-get completions :partiallyAccepted) 1) "partiallyAccepted: %S" completions)
        (moelsp-test-log "moelsp-status echoes %S; *moelsp-status* shows the summary" echoed))

      ;; 8b. A snooze: the mode line says so, nothing as you type reaches the model.
      (moelsp-snooze 1)
      (moelsp-test-check (equal (moelsp-mode-line-string) " Moe:zz") "snoozed, the mode line shows %S"
                         (moelsp-mode-line-string))
      (let* ((asked (lambda () (plist-get (plist-get (jsonrpc-request conn :moelsp/status nil) :completions)
                                          :requests)))
             (before (funcall asked))
             (params (list :textDocument (list :uri (moelsp--buffer-uri)) :position (moelsp--pos-to-lsp)
                           :context (list :triggerKind 2))))
        (moelsp--flush)
        (moelsp-test-check (seq-empty-p (plist-get (jsonrpc-request conn :textDocument/inlineCompletion params)
                                                   :items))
                           "a suggestion while snoozed")
        (moelsp-test-check (equal (funcall asked) before) "the model was asked while snoozed")
        (moelsp-resume)
        (moelsp-test-check (equal (moelsp-mode-line-string) " Moe") "resumed, the mode line shows %S"
                           (moelsp-mode-line-string))
        (jsonrpc-request conn :textDocument/inlineCompletion params)
        (moelsp-test-check (equal (funcall asked) (1+ before)) "resumed, the model was not asked"))
      (moelsp-test-log "moelsp-snooze and moelsp-resume reach the server")

      ;; 9. The server's copy of the document follows the buffer, non-BMP characters included.
      (goto-char (point-min))
      (moelsp-test-type "# π 😀 ok")
      (insert "\n")
      (search-backward "😀")
      (forward-char 1)
      (moelsp-test-type "!!")
      (delete-char 2)
      (end-of-line)
      (moelsp-test-type "é")
      (moelsp-dismiss)
      (moelsp--flush)
      (moelsp-test-check (equal moelsp-test--shadow (moelsp--text))
                         "the server's document differs from the buffer:\n%S\n%S"
                         moelsp-test--shadow (moelsp--text))
      (moelsp-test-check (string-prefix-p "# π 😀!!ké\n" (moelsp--text)) "edits went wrong: %S"
                         (substring (moelsp--text) 0 20))
      (moelsp-test-log "the document the server has is the buffer's text")

      ;; 9b. moelsp-choose-model: the server's list (the cache; the guide
      ;; cannot reach a hub here) through completing-read; the cached model
      ;; chosen loads in place.
      (let (offered)
        (cl-letf (((symbol-function 'completing-read)
                   (lambda (_prompt cands &rest _)
                     (setq offered cands)
                     (seq-find (lambda (c) (string-match-p "tiny-Q8_0\\.gguf" c)) cands))))
          (call-interactively #'moelsp-choose-model))
        (moelsp-test-check (string-match-p "embedded" (car offered)) "the first choice: %S" offered)
        (moelsp-test-check (seq-find (lambda (c) (string-match-p "cached acme/Tiny-GGUF/tiny-Q8_0\\.gguf" c)) offered)
                           "the cached model is not offered: %S" offered)
        (moelsp-test-wait (lambda ()
                            (let ((st (jsonrpc-request conn :moelsp/status nil)))
                              (and (equal (plist-get st :state) "ready")
                                   (string-match-p "tiny-Q8_0\\.gguf" (or (plist-get st :message) "")))))
                          60 "the chosen model to load")
        (moelsp-test-check (string-suffix-p "tiny-Q8_0.gguf" moelsp-model-override)
                           "the choice is not kept: %S" moelsp-model-override)
        (moelsp-test-check (string-suffix-p "tiny-Q8_0.gguf"
                                            (plist-get (moelsp-models--options '(:chat (:maxTokens 1))) :model))
                           "a server started later would not get the choice")
        (moelsp-test-log "moelsp-choose-model offered %d choices; the cached model chosen was loaded"
                         (length offered)))

      ;; 10. eglot is still there, with its own live process; then both shut down.
      (moelsp-test-check (and (eglot-managed-p) (eq (eglot-current-server) eglot-server)
                              (jsonrpc-running-p eglot-server) (moelsp--live-p conn))
                         "eglot or moelsp is gone before the shutdown")
      (let ((proc (jsonrpc--process conn)))
        (moelsp-shutdown)
        (moelsp-test-check (not moelsp-mode) "moelsp-shutdown left moelsp-mode on")
        (moelsp-test-wait (lambda () (not (process-live-p proc))) 10 "the moelsp process to exit")
        (moelsp-test-check (eql (process-exit-status proc) 0) "moelsp exited with %s" (process-exit-status proc))
        (moelsp-test-check (equal (moelsp-mode-line-string) " Moe:off") "after shutdown: %S"
                           (moelsp-mode-line-string)))
      (moelsp-test-check (and (eglot-managed-p) (jsonrpc-running-p eglot-server))
                         "shutting moelsp down took eglot's server along")
      (eglot-shutdown eglot-server)
      (moelsp-test-log "both servers shut down"))
  (error (moelsp-test-fail "%S" err)))

(ignore-errors (delete-directory moelsp-test--tmp t))
(princ "moelsp.el test passed\n")
(kill-emacs 0)
