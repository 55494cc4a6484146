;;; moelsp.el --- Local AI completions and chat from moelsp, next to your LSP client  -*- lexical-binding: t; -*-

;; Author: the moelsp authors
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1") (jsonrpc "1.0"))
;; Keywords: tools, convenience, languages

;; This file is not part of GNU Emacs.

;;; Commentary:

;; moelsp is a local coding assistant: one process, `moelsp lsp', speaks
;; the Language Server Protocol over stdio and runs a language model on
;; this machine.  This package talks to it over its own JSON-RPC
;; connection, so it runs next to eglot or lsp-mode (which allow one
;; server per buffer) instead of replacing your language server.
;;
;; - `moelsp-mode' (or `global-moelsp-mode'): ghost-text suggestions
;;   while you type.  While one shows: TAB accepts it, M-f accepts a
;;   word, M-<right> accepts a line (C-e too, at the end of a line),
;;   M-n / M-p cycle alternatives, C-g dismisses.  Moving point or
;;   editing elsewhere dismisses it; typing its first characters keeps it.
;; - `moelsp-chat' asks a question (about the region when it is active)
;;   and streams the answer into the *moelsp-chat* buffer, which keeps
;;   the conversation; `moelsp-explain', `moelsp-fix' and
;;   `moelsp-document' ask about the region (or the function at point).
;; - The mode line shows the server's state: " Moe:loading", " Moe"
;;   (ready), " Moe:busy", " Moe:err", " Moe:off".
;; - `moelsp-status', `moelsp-restart', `moelsp-shutdown',
;;   `moelsp-show-log' (the server's stderr, *moelsp-log*).
;;
;; One server process runs per project root (project.el, else the
;; buffer's directory), shared by that project's buffers, or one for
;; all buffers (`moelsp-server-scope').
;;
;; The package is three files in one folder, all loaded by
;; (require 'moelsp): moelsp.el (settings, the server connections,
;; document sync, the minor modes, the mode line and the commands),
;; moelsp-ghost.el (the suggestions) and moelsp-chat.el (the chat
;; buffer, explain / fix / document).
;;
;; Quick start:
;;
;;   (add-to-list 'load-path "/path/to/moelsp/editor-clients/emacs")
;;   (require 'moelsp)
;;   (add-hook 'prog-mode-hook #'moelsp-mode)

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'project)
(require 'subr-x)
(require 'url-util)

;; The suggestions (ghost text) and the chat buffer live in files of their own,
;; loaded here: (require 'moelsp) is all a user needs.
(require 'moelsp-ghost)
(require 'moelsp-chat)
(require 'moelsp-models)

(defconst moelsp-version "0.1.0" "The version of moelsp.el.")

;;;; Customization

(defgroup moelsp nil
  "Local AI completions and chat from the moelsp language server."
  :group 'tools
  :prefix "moelsp-")

(defcustom moelsp-command "moelsp"
  "The moelsp program.
A string is the program (a name on the variable `exec-path', or a
file name); it runs as PROGRAM lsp.  A list (PROGRAM ARG...) runs as it is, for
example (\"moelsp\" \"lsp\" \"--threads\" \"4\")."
  :type '(choice (string :tag "Program")
                 (repeat :tag "Program and arguments" string)))

(defcustom moelsp-initialization-options nil
  "Settings sent as the server's initializationOptions.
A plist or an alist, mapped to a JSON object: keys are the setting
names of moelsp's README, nested or dotted.  Use vectors for arrays.
For example:

  (:model \"~/models/qwen3-coder-30b-a3b-q4_k_m.gguf\"
   :completion (:maxTokens 48))

nil sends no settings: the server then uses its flags, its config file
and, without a model setting, the embedded default model.  Settings
that shape the engine (model, threads, ...) apply at the next
\\[moelsp-restart]."
  :type '(choice (const :tag "None" nil)
                 (plist :tag "Plist")
                 (alist :tag "Alist")))

(defcustom moelsp-idle-delay 0.2
  "Seconds without typing before a suggestion is requested."
  :type 'number)

(defcustom moelsp-auto-suggest t
  "Non-nil: request suggestions while you type.
nil: only \\[moelsp-complete] asks for one."
  :type 'boolean)

(defcustom moelsp-completion-timeout 30
  "Seconds to wait for a suggestion before giving up on it."
  :type 'number)

(defcustom moelsp-connect-timeout 30
  "Seconds to wait for the server to answer `initialize'."
  :type 'number)

(defcustom moelsp-server-scope 'project
  "Which buffers share a server process (each process loads the model).
`project': one per project root (project.el), or per directory for a
buffer outside any project.  `global': one for everything, which
saves memory with a large model."
  :type '(choice (const :tag "One per project" project)
                 (const :tag "One for all buffers" global)))

(defcustom moelsp-global-modes '(prog-mode)
  "Major modes (and the modes derived from them) `global-moelsp-mode' enables in.
Only buffers that visit a local file are considered."
  :type '(repeat symbol))

(defcustom moelsp-language-ids
  '((c++-mode . "cpp") (c++-ts-mode . "cpp") (js-mode . "javascript")
    (js2-mode . "javascript") (js-ts-mode . "javascript")
    (typescript-ts-mode . "typescript") (tsx-ts-mode . "typescriptreact")
    (sh-mode . "shellscript") (bash-ts-mode . "shellscript")
    (emacs-lisp-mode . "elisp") (lisp-interaction-mode . "elisp")
    (cperl-mode . "perl") (rustic-mode . "rust") (tuareg-mode . "ocaml")
    (cmake-ts-mode . "cmake") (makefile-gmake-mode . "makefile"))
  "LSP language ids of major modes not named after their language.
Other modes send their name without \"-ts-mode\" or \"-mode\"."
  :type '(alist :key-type symbol :value-type string))

(defcustom moelsp-chat-history-chars 1500
  "How much of the earlier conversation `moelsp-chat' sends, in characters.
The newest messages are kept; the new question always goes.  The
server refuses a prompt longer than the model's context (512 tokens
for the embedded default model), so raise this with a larger model."
  :type 'integer)

(defcustom moelsp-chat-buffer-name "*moelsp-chat*"
  "Name of the chat buffer."
  :type 'string)

(defcustom moelsp-events-buffer-size 200000
  "Size of each connection's JSON-RPC events buffer, in characters.
0 disables it (faster), nil keeps everything."
  :type '(choice (const :tag "Unlimited" nil) integer))

(defcustom moelsp-log-buffer-size 1000000
  "Size past which the *moelsp-log* buffer loses its oldest lines."
  :type 'integer)

(defcustom moelsp-chat-answer-functions nil
  "Functions called with the answer's text when a chat answer is complete."
  :type 'hook)

(defface moelsp-ghost-face '((t :inherit shadow))
  "Face of the suggestion shown at point.")

(defface moelsp-chat-heading-face '((t :inherit font-lock-keyword-face :weight bold))
  "Face of the \"## You\" and \"## moelsp\" lines of the chat buffer.")

(defface moelsp-chat-footer-face '((t :inherit shadow))
  "Face of the line after each chat answer.")

;;;; Connections

(defclass moelsp-connection (jsonrpc-process-connection)
  ((root :initarg :root :accessor moelsp--root
         :documentation "The project root this server serves.")
   (stderr-process :initarg :stderr-process :initform nil
                   :accessor moelsp--stderr-process)
   (state :initform "starting" :accessor moelsp--state
          :documentation "starting, loading, ready, busy, error, exited or stopped.")
   (message :initform nil :accessor moelsp--message)
   (status :initform nil :accessor moelsp--status
           :documentation "The last moelsp/status, a plist.")
   (snoozed-until :initform nil :accessor moelsp--snoozed-until
                  :documentation "When the server's snooze ends (a `float-time'), or nil.")
   (pending :initform 0 :accessor moelsp--pending
            :documentation "Requests sent and not answered yet.")
   (progress :initform (make-hash-table :test #'equal)
             :accessor moelsp--progress-handlers
             :documentation "Progress token to function of the value.")
   (capabilities :initform nil :accessor moelsp--capabilities)
   (shutting-down :initform nil :accessor moelsp--shutting-down))
  :documentation "A connection to one `moelsp lsp' process.")

(defvar moelsp--connections (make-hash-table :test #'equal)
  "Project root to its `moelsp-connection'.")

(defvar-local moelsp--connection nil
  "This buffer's `moelsp-connection'.")

(defvar moelsp-mode)

(defun moelsp--live-p (conn)
  "Non-nil if CONN is a connection whose process runs."
  (and conn (jsonrpc-running-p conn)))

(defun moelsp--buffer-root ()
  "The root the current buffer's server serves (see `moelsp-server-scope')."
  (file-name-as-directory
   (expand-file-name
    (if (eq moelsp-server-scope 'global)
        "~/"
      (or (when-let ((project (ignore-errors (project-current nil))))
            (project-root project))
          default-directory)))))

(defun moelsp--command-line ()
  "The server's command line, from `moelsp-command'."
  (let ((cmd (if (stringp moelsp-command) (list moelsp-command "lsp") moelsp-command)))
    (unless (and (consp cmd) (stringp (car cmd)))
      (user-error "moelsp: `moelsp-command' must be a string or a list of strings"))
    (unless (or (file-name-absolute-p (car cmd)) (executable-find (car cmd)))
      (user-error "moelsp: cannot find %S on `exec-path'; set `moelsp-command' to the moelsp binary"
                  (car cmd)))
    cmd))

(defun moelsp--path-to-uri (file)
  "The file: URI of FILE."
  (let ((allowed (copy-sequence url-path-allowed-chars)))
    (aset allowed ?: nil)
    (concat "file://" (url-hexify-string (expand-file-name file) allowed))))

(defun moelsp--connect (root)
  "The running connection for ROOT, started if needed."
  (let ((conn (gethash root moelsp--connections)))
    (if (moelsp--live-p conn) conn (moelsp--start root))))

(defun moelsp--start (root)
  "Start a server for ROOT and initialize it; return its connection."
  (let* ((command (moelsp--command-line))
         (name (format "moelsp[%s]" (abbreviate-file-name (directory-file-name root))))
         (default-directory (if (file-directory-p root) root (expand-file-name "~/")))
         (stderr (make-pipe-process :name (concat name " stderr") :buffer nil :noquery t
                                    :coding 'utf-8-unix :filter #'moelsp--stderr-filter))
         proc conn)
    (moelsp--log "starting %s in %s" (mapconcat #'identity command " ") root)
    (condition-case err
        (setq proc (make-process :name name :command command :connection-type 'pipe
                                 :coding 'utf-8-emacs-unix :noquery t :stderr stderr))
      (error (delete-process stderr)
             (user-error "moelsp: cannot start %s: %s" (car command) (error-message-string err))))
    (let ((make (lambda (&rest events-initargs)
                  (apply #'make-instance 'moelsp-connection
                         :name name :process proc :root root :stderr-process stderr
                         :notification-dispatcher #'moelsp--handle-notification
                         :request-dispatcher #'moelsp--handle-request
                         :on-shutdown #'moelsp--on-shutdown
                         events-initargs))))
      (setq conn (condition-case nil
                     ;; jsonrpc 1.0.24 and later (Emacs 30)
                     (funcall make :events-buffer-config (list :size moelsp-events-buffer-size))
                   ;; jsonrpc 1.0.14 (Emacs 28)
                   (invalid-slot-name
                    (funcall make :events-buffer-scrollback-size moelsp-events-buffer-size)))))
    (puthash root conn moelsp--connections)
    (condition-case err
        (let ((result (jsonrpc-request conn :initialize (moelsp--initialize-params root)
                                       :timeout moelsp-connect-timeout)))
          (setf (moelsp--capabilities conn) (plist-get result :capabilities))
          (jsonrpc-notify conn :initialized (make-hash-table))
          (when (equal (moelsp--state conn) "starting")
            (setf (moelsp--state conn) "loading"))
          (moelsp--refresh-mode-line)
          conn)
      (error
       (setf (moelsp--shutting-down conn) t)
       (ignore-errors (jsonrpc-shutdown conn t))
       (remhash root moelsp--connections)
       (user-error "moelsp: the server did not initialize (%s); see M-x moelsp-show-log"
                   (error-message-string err))))))

(defun moelsp--initialize-params (root)
  "The `initialize' request's params for ROOT."
  (list :processId (emacs-pid)
        :clientInfo (list :name "moelsp.el" :version moelsp-version)
        :rootPath root
        :rootUri (moelsp--path-to-uri root)
        :workspaceFolders (vector (list :uri (moelsp--path-to-uri root)
                                        :name (file-name-nondirectory (directory-file-name root))))
        :capabilities
        (list :textDocument (list :synchronization (list :dynamicRegistration :json-false
                                                         :didSave :json-false)
                                  :inlineCompletion (list :dynamicRegistration :json-false))
              :workspace (list :executeCommand (list :dynamicRegistration :json-false))
              :window (list :workDoneProgress :json-false))
        :initializationOptions (or (moelsp-models--options moelsp-initialization-options) (make-hash-table))))

(defun moelsp--handle-notification (conn method params)
  "Handle the server's notification METHOD with PARAMS on CONN."
  (condition-case-unless-debug err
      (pcase method
        ('moelsp/status (moelsp--set-status conn params))
        ('$/progress
         (when-let ((handler (gethash (plist-get params :token) (moelsp--progress-handlers conn))))
           (funcall handler (plist-get params :value))))
        ('window/showMessage (message "moelsp: %s" (plist-get params :message)))
        ('window/logMessage
         ;; The server writes the same lines to stderr (*moelsp-log*); errors also go to the echo area.
         (when (eql (plist-get params :type) 1)
           (message "moelsp: %s" (plist-get params :message))))
        (_ nil))
    (error (moelsp--log "moelsp.el: error handling %s: %s" method (error-message-string err)))))

(defun moelsp--handle-request (_conn method _params)
  "Answer the server's request METHOD."
  (pcase method
    ((or 'window/workDoneProgress/create 'client/registerCapability 'client/unregisterCapability) nil)
    ('workspace/configuration [])
    (_ (jsonrpc-error :code -32601 :message (format "moelsp.el does not handle %s" method)))))

(defun moelsp--set-status (conn status)
  "Record STATUS, a moelsp/status plist, as CONN's state."
  (setf (moelsp--status conn) status)
  (when-let ((state (plist-get status :state)))
    (setf (moelsp--state conn) state))
  (setf (moelsp--message conn) (plist-get status :message))
  (let ((left (plist-get (plist-get status :completions) :snoozeLeftMs)))
    (when (numberp left)
      (setf (moelsp--snoozed-until conn) (and (> left 0) (+ (float-time) (/ left 1000.0))))))
  (when (equal (plist-get status :state) "error")
    (message "moelsp: %s" (plist-get status :message)))
  ;; A model being pulled (`moelsp-choose-model'): its progress.
  (let ((pull (plist-get status :pull)))
    (when (equal (plist-get pull :state) "pulling")
      (let ((total (plist-get pull :total)) (done (plist-get pull :done)))
        (message "moelsp: pulling %s%s" (plist-get pull :ref)
                 (if (and (numberp total) (> total 0)) (format " %d%%" (floor (* 100 done) total)) "")))))
  (moelsp--refresh-mode-line))

(defun moelsp--on-shutdown (conn)
  "CONN's process has exited."
  (let ((code (process-exit-status (jsonrpc--process conn))))
    (if (moelsp--shutting-down conn)
        (setf (moelsp--state conn) "stopped")
      (setf (moelsp--state conn) "exited"
            (moelsp--message conn) (format "the server exited with status %s" code))
      (message "moelsp: the server exited with status %s; see M-x moelsp-show-log, M-x moelsp-restart"
               code))
    (moelsp--log "%s exited with status %s" (jsonrpc-name conn) code))
  (when (eq (gethash (moelsp--root conn) moelsp--connections) conn)
    (remhash (moelsp--root conn) moelsp--connections))
  (dolist (buf (moelsp--connection-buffers conn))
    (with-current-buffer buf
      (moelsp--clear-suggestion)
      (setq moelsp--inflight nil)))
  (let ((stderr (moelsp--stderr-process conn)))
    ;; Let the last lines of stderr arrive first.
    (when stderr (run-with-timer 1 nil (lambda () (when (process-live-p stderr) (delete-process stderr))))))
  (let ((proc (jsonrpc--process conn)))
    (when (buffer-live-p (process-buffer proc)) (kill-buffer (process-buffer proc)))
    (let ((hidden (process-get proc 'jsonrpc-stderr)))
      (when (buffer-live-p hidden) (kill-buffer hidden))))
  (moelsp--refresh-mode-line))

(defun moelsp--connection-buffers (conn)
  "The buffers whose documents are open on CONN."
  (cl-remove-if-not (lambda (buf) (eq (buffer-local-value 'moelsp--connection buf) conn))
                    (buffer-list)))

(defun moelsp--shutdown (conn)
  "Shut CONN's server down (shutdown, exit), killing it if it lingers."
  (setf (moelsp--shutting-down conn) t)
  (when (moelsp--live-p conn)
    (ignore-errors (jsonrpc-request conn :shutdown nil :timeout 3))
    (ignore-errors (jsonrpc-notify conn :exit nil))
    (let ((deadline (+ (float-time) 3)))
      (while (and (moelsp--live-p conn) (< (float-time) deadline))
        (accept-process-output nil 0.05))))
  (ignore-errors (jsonrpc-shutdown conn t))
  (when (eq (gethash (moelsp--root conn) moelsp--connections) conn)
    (remhash (moelsp--root conn) moelsp--connections))
  (moelsp--refresh-mode-line))

(cl-defun moelsp--request (conn method params &key success error (timeout nil timeout-p))
  "Send request METHOD with PARAMS on CONN; return its id.
SUCCESS is called with the result, ERROR with the error plist (also on
timeout, code -1).  TIMEOUT in seconds, nil for none; the default is
`moelsp-completion-timeout'."
  (cl-incf (moelsp--pending conn))
  (moelsp--refresh-mode-line)
  (let* ((done nil)
         (finish (lambda ()
                   (unless done
                     (setq done t)
                     (cl-decf (moelsp--pending conn))
                     (moelsp--refresh-mode-line))))
         (ret (jsonrpc-async-request
               conn method params
               :success-fn (lambda (result) (funcall finish) (when success (funcall success result)))
               :error-fn (lambda (err) (funcall finish) (when error (funcall error err)))
               :timeout-fn (lambda ()
                             (funcall finish)
                             (when error (funcall error (list :code -1 :message "timed out"))))
               :timeout (if timeout-p timeout moelsp-completion-timeout))))
    ;; jsonrpc 1.0.14 (Emacs 28) returns nil; later versions return the id.
    (cond ((integerp ret) ret)
          ((and (consp ret) (integerp (car ret))) (car ret))
          ((fboundp 'jsonrpc--next-request-id) (jsonrpc--next-request-id conn)))))

(defun moelsp--cancel-request (conn id)
  "Ask CONN's server to stop working on request ID."
  (when (and id (moelsp--live-p conn))
    (jsonrpc-notify conn :$/cancelRequest (list :id id))))

;;;; Log

(defconst moelsp-log-buffer-name "*moelsp-log*" "The log buffer's name.")

(defun moelsp--log-buffer ()
  "The *moelsp-log* buffer, created if needed."
  (or (get-buffer moelsp-log-buffer-name)
      (with-current-buffer (get-buffer-create moelsp-log-buffer-name)
        (buffer-disable-undo)
        (setq buffer-read-only t)
        (current-buffer))))

(defun moelsp--log-insert (text)
  "Append TEXT to the log buffer."
  (with-current-buffer (moelsp--log-buffer)
    (let ((inhibit-read-only t)
          (follow (mapcar (lambda (w) (cons w (= (window-point w) (point-max))))
                          (get-buffer-window-list (current-buffer) nil t))))
      (save-excursion
        (goto-char (point-max))
        (insert text)
        (when (> (buffer-size) moelsp-log-buffer-size)
          (goto-char (- (point-max) (/ moelsp-log-buffer-size 2)))
          (forward-line 1)
          (delete-region (point-min) (point))))
      (dolist (wf follow) (when (cdr wf) (set-window-point (car wf) (point-max)))))))

(defun moelsp--log (format &rest args)
  "Log a line made of FORMAT and ARGS to *moelsp-log*."
  (moelsp--log-insert (concat "[moelsp.el] " (apply #'format format args) "\n")))

(defun moelsp--stderr-filter (_proc text)
  "Append the server's stderr TEXT to *moelsp-log*."
  (moelsp--log-insert text))

;;;; Positions and documents

(defun moelsp--utf16-length (string)
  "The length of STRING in UTF-16 code units."
  (let ((n (length string)))
    (dotimes (i (length string))
      (when (> (aref string i) #xFFFF) (cl-incf n)))
    n))

(defun moelsp--pos-to-lsp (&optional pos)
  "POS (default point) as an LSP position plist, the column in UTF-16 units."
  (save-excursion
    (save-restriction
      (widen)
      (when pos (goto-char pos))
      (list :line (1- (line-number-at-pos nil t))
            :character (moelsp--utf16-length
                        (buffer-substring-no-properties (save-excursion (forward-line 0) (point))
                                                        (point)))))))

(defun moelsp--lsp-to-pos (position)
  "The buffer position of POSITION, an LSP position plist."
  (save-excursion
    (save-restriction
      (widen)
      (goto-char (point-min))
      (forward-line (plist-get position :line))
      (let ((units (plist-get position :character))
            (eol (line-end-position)))
        (while (and (> units 0) (< (point) eol))
          (setq units (- units (if (> (char-after) #xFFFF) 2 1)))
          (forward-char 1))
        (point)))))

(defvar-local moelsp--uri nil "The URI this buffer's document is open as, or nil.")
(defvar-local moelsp--version 0 "The document's version.")
(defvar-local moelsp--changes nil
  "Changes not sent yet: a list of content changes, newest first, or :full.")
(defvar-local moelsp--before-change nil "The region about to change: (BEG END START END).")
(defvar moelsp--dirty-buffers nil "Buffers with changes not sent yet.")
(defvar moelsp--flush-timer nil "Timer sending the changes of `moelsp--dirty-buffers'.")

(defun moelsp--buffer-uri ()
  "The URI of the current buffer's document."
  (if buffer-file-name
      (moelsp--path-to-uri buffer-file-name)
    (concat "untitled:" (url-hexify-string (buffer-name)))))

(defun moelsp--language-id ()
  "The LSP language id of the current buffer."
  (or (cdr (assq major-mode moelsp-language-ids))
      (let ((name (symbol-name major-mode)))
        (replace-regexp-in-string "\\(?:-ts\\)?-mode\\'" "" name))))

(defun moelsp--text ()
  "The whole buffer's text."
  (save-restriction (widen) (buffer-substring-no-properties (point-min) (point-max))))

(defun moelsp--did-open ()
  "Open the current buffer's document on its server."
  (setq moelsp--uri (moelsp--buffer-uri)
        moelsp--version 0
        moelsp--changes nil)
  (jsonrpc-notify moelsp--connection :textDocument/didOpen
                  (list :textDocument (list :uri moelsp--uri
                                            :languageId (moelsp--language-id)
                                            :version moelsp--version
                                            :text (moelsp--text)))))

(defun moelsp--did-close ()
  "Close the current buffer's document on its server."
  (when (and moelsp--uri (moelsp--live-p moelsp--connection))
    (jsonrpc-notify moelsp--connection :textDocument/didClose
                    (list :textDocument (list :uri moelsp--uri))))
  (setq moelsp--uri nil moelsp--changes nil))

(defun moelsp--before-change (beg end)
  "Remember the LSP range of BEG..END, about to change."
  (when moelsp--uri
    (setq moelsp--before-change
          (list beg end (moelsp--pos-to-lsp beg) (moelsp--pos-to-lsp end)))))

(defun moelsp--after-change (beg end oldlen)
  "Record the change of BEG..END (OLDLEN characters before) for the server."
  (when moelsp--uri
    (let ((bc moelsp--before-change))
      (setq moelsp--before-change nil)
      (cond ((eq moelsp--changes :full))
            ((and bc (= beg (nth 0 bc)) (= (+ beg oldlen) (nth 1 bc)) (< (length moelsp--changes) 64))
             (push (list :range (list :start (nth 2 bc) :end (nth 3 bc))
                         :text (save-restriction (widen) (buffer-substring-no-properties beg end)))
                   moelsp--changes))
            (t (setq moelsp--changes :full))))
    (cl-pushnew (current-buffer) moelsp--dirty-buffers)
    (unless moelsp--flush-timer
      (setq moelsp--flush-timer (run-with-timer 0.5 nil #'moelsp--flush-all))))
  ;; An edit away from the suggestion dismisses it (typing at it is judged after the command).
  (when (and moelsp--overlay (not moelsp--accepting)
             (/= beg (overlay-start moelsp--overlay)))
    (moelsp--clear-suggestion)))

(defun moelsp--flush ()
  "Send the current buffer's pending changes."
  (when (and moelsp--uri moelsp--changes (moelsp--live-p moelsp--connection))
    (cl-incf moelsp--version)
    (jsonrpc-notify moelsp--connection :textDocument/didChange
                    (list :textDocument (list :uri moelsp--uri :version moelsp--version)
                          :contentChanges (if (eq moelsp--changes :full)
                                              (vector (list :text (moelsp--text)))
                                            (vconcat (reverse moelsp--changes))))))
  (setq moelsp--changes nil))

(defun moelsp--flush-all ()
  "Send the pending changes of every buffer."
  (setq moelsp--flush-timer nil)
  (let ((bufs moelsp--dirty-buffers))
    (setq moelsp--dirty-buffers nil)
    (dolist (buf bufs)
      (when (buffer-live-p buf)
        (with-current-buffer buf (moelsp--flush))))))

;;;; Mode line

(defun moelsp--effective-state (conn)
  "CONN's state for the mode line."
  (cond ((null conn) "off")
        ((not (moelsp--live-p conn))
         (if (equal (moelsp--state conn) "exited") "error" "off"))
        ((and (equal (moelsp--state conn) "ready") (> (moelsp--pending conn) 0)) "busy")
        (t (moelsp--state conn))))

(defvar moelsp--mode-line-map
  (let ((map (make-sparse-keymap)))
    (define-key map [mode-line mouse-1] #'moelsp-status)
    (define-key map [mode-line mouse-3] #'moelsp-show-log)
    map)
  "Mouse keys of the mode-line lighter.")

(defun moelsp-mode-line-string ()
  "The mode-line lighter of the current buffer: \" Moe\" when ready."
  (let* ((conn moelsp--connection)
         (state (moelsp--effective-state conn))
         (snoozed (and conn (moelsp--snoozed-until conn) (> (moelsp--snoozed-until conn) (float-time))))
         (text (pcase state
                 ((and "ready" (guard snoozed)) " Moe:zz")
                 ((or "ready" "busy" "loading" "starting") (if (equal state "ready") " Moe" (concat " Moe:" state)))
                 ("error" " Moe:err")
                 (_ " Moe:off"))))
    (propertize text
                'help-echo (format "moelsp: %s%s\nmouse-1: status, mouse-3: log"
                                   state
                                   (if (and conn (moelsp--message conn))
                                       (concat " — " (moelsp--message conn)) ""))
                'mouse-face 'mode-line-highlight
                'local-map moelsp--mode-line-map)))

(defun moelsp--refresh-mode-line ()
  "Redraw the mode lines."
  (force-mode-line-update t))

;;;; The minor modes

(defvar moelsp-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c /") #'moelsp-complete)
    map)
  "Keys of `moelsp-mode'.")

(define-minor-mode moelsp-mode
  "Suggestions from moelsp, shown as ghost text at point while you type.
It runs its own moelsp server (one per project, shared), next to any
eglot or lsp-mode server of the buffer.

While a suggestion shows:
\\{moelsp-suggestion-map}
Always:
\\{moelsp-mode-map}"
  :lighter (:eval (moelsp-mode-line-string))
  :keymap moelsp-mode-map
  :group 'moelsp
  (if moelsp-mode
      (condition-case err
          (moelsp--enable)
        (error
         (moelsp--disable)
         (setq moelsp-mode nil)
         (message "%s" (error-message-string err))))
    (moelsp--disable)))

(defun moelsp--enable ()
  "Turn `moelsp-mode' on in the current buffer."
  (when (file-remote-p default-directory)
    (user-error "moelsp: remote files are not supported"))
  (setq moelsp--connection (moelsp--connect (moelsp--buffer-root)))
  (unless moelsp--emulation-alist
    (setq moelsp--emulation-alist (list (cons 'moelsp--suggestion-active moelsp-suggestion-map))))
  (add-to-list 'emulation-mode-map-alists 'moelsp--emulation-alist)
  (add-hook 'before-change-functions #'moelsp--before-change nil t)
  (add-hook 'after-change-functions #'moelsp--after-change nil t)
  (add-hook 'post-command-hook #'moelsp--post-command nil t)
  (add-hook 'kill-buffer-hook #'moelsp--disable nil t)
  (add-hook 'change-major-mode-hook #'moelsp--disable nil t)
  (add-hook 'before-revert-hook #'moelsp--did-close nil t)
  (add-hook 'after-revert-hook #'moelsp--reopen nil t)
  (add-hook 'after-set-visited-file-name-hook #'moelsp--reopen nil t)
  (setq moelsp--last-tick (buffer-chars-modified-tick))
  (moelsp--did-open))

(defun moelsp--reopen ()
  "Open the document again (after a revert or a new file name)."
  (when (moelsp--live-p moelsp--connection)
    (moelsp--did-close)
    (moelsp--did-open)))

(defun moelsp--disable ()
  "Turn `moelsp-mode' off in the current buffer."
  (moelsp--cancel-inflight)
  (moelsp--clear-suggestion)
  (moelsp--did-close)
  (setq moelsp--connection nil)
  (remove-hook 'before-change-functions #'moelsp--before-change t)
  (remove-hook 'after-change-functions #'moelsp--after-change t)
  (remove-hook 'post-command-hook #'moelsp--post-command t)
  (remove-hook 'kill-buffer-hook #'moelsp--disable t)
  (remove-hook 'change-major-mode-hook #'moelsp--disable t)
  (remove-hook 'before-revert-hook #'moelsp--did-close t)
  (remove-hook 'after-revert-hook #'moelsp--reopen t)
  (remove-hook 'after-set-visited-file-name-hook #'moelsp--reopen t))

(defun moelsp--turn-on ()
  "Turn `moelsp-mode' on where `global-moelsp-mode' wants it."
  (when (and buffer-file-name (not (minibufferp))
             (not (file-remote-p default-directory))
             (apply #'derived-mode-p moelsp-global-modes))
    (moelsp-mode 1)))

;;;###autoload
(define-globalized-minor-mode global-moelsp-mode moelsp-mode moelsp--turn-on
  :group 'moelsp)

;;;; Commands

(defun moelsp--current-connection (&optional start)
  "The connection for the current buffer; START non-nil: start one if needed."
  (cond ((moelsp--live-p moelsp--connection) moelsp--connection)
        ((and (derived-mode-p 'moelsp-chat-mode) (moelsp--live-p moelsp-chat--connection))
         moelsp-chat--connection)
        (t (let ((root (moelsp--buffer-root)))
             (if start (moelsp--connect root)
               (let ((conn (gethash root moelsp--connections)))
                 (and (moelsp--live-p conn) conn)))))))

;;;###autoload
(defun moelsp-status (&optional verbose)
  "Show the state of this buffer's moelsp server; return the status plist.
The echo area gets the server's line (state, model, tokens/s,
completion counts, a snooze) and the project root.  With VERBOSE (a
prefix argument), a buffer shows the whole status (plan and its
reasons, completion telemetry, KV cache, scheduler, index)."
  (interactive "P")
  (let ((conn (or (moelsp--current-connection)
                  (and moelsp--connection (not (moelsp--live-p moelsp--connection))
                       (user-error "moelsp: %s (M-x moelsp-restart)"
                                   (or (moelsp--message moelsp--connection) "the server is not running")))
                  (user-error "moelsp: no server for this buffer (M-x moelsp-mode starts one)"))))
    (let ((status (jsonrpc-request conn :moelsp/status nil :timeout 10)))
      (moelsp--set-status conn status)
      (if verbose
          (moelsp--show-status-buffer conn status)
        ;; The server words its status (every editor shows the same line);
        ;; the project root is what only this client knows.
        (message "%s — %s"
                 (or (plist-get status :summaryLine)
                     (format "moelsp %s%s" (plist-get status :state)
                             (if (plist-get status :message) (format " (%s)" (plist-get status :message)) "")))
                 (abbreviate-file-name (moelsp--root conn))))
      status)))

;;;###autoload
(defun moelsp-snooze (&optional minutes)
  "No suggestions as you type for MINUTES (default 5; 0 resumes).
A prefix argument gives the minutes.  The snooze is the server's: every
buffer it serves is quiet; \[moelsp-complete] still asks."
  (interactive (list (if current-prefix-arg (prefix-numeric-value current-prefix-arg)
                       (read-number "moelsp: no suggestions as you type for (minutes): " 5))))
  (let ((conn (or (moelsp--current-connection)
                  (user-error "moelsp: no server for this buffer (M-x moelsp-mode starts one)")))
        (minutes (or minutes 5)))
    (jsonrpc-request conn :workspace/executeCommand
                     (list :command "moelsp.snooze" :arguments (vector minutes)) :timeout 10)
    (moelsp--set-status conn (jsonrpc-request conn :moelsp/status nil :timeout 10))
    (message (if (> minutes 0) (format "moelsp: no suggestions as you type for %s min" minutes)
               "moelsp: suggestions resumed"))))

;;;###autoload
(defun moelsp-resume ()
  "End the server's snooze (`moelsp-snooze')."
  (interactive)
  (moelsp-snooze 0))

;;;###autoload
(defun moelsp-toggle-auto-suggest ()
  "Switch between suggestions as you type and only when asked.
Only when asked (`moelsp-auto-suggest' nil): \[moelsp-complete]."
  (interactive)
  (setq moelsp-auto-suggest (not moelsp-auto-suggest))
  (message (if moelsp-auto-suggest "moelsp: suggestions as you type"
             (substitute-command-keys "moelsp: suggestions only when asked (\[moelsp-complete])"))))

(declare-function json-pretty-print-buffer "json" (&optional minimize))

(defun moelsp--show-status-buffer (conn status)
  "Show STATUS of CONN in the *moelsp-status* buffer.
The server's own text of it (`summary': state, plan and its reasons,
completions, caches, scheduler), then every field as JSON."
  (require 'json)
  (with-current-buffer (get-buffer-create "*moelsp-status*")
    (let ((inhibit-read-only t)
          (fields (copy-sequence status)))
      (erase-buffer)
      (special-mode)
      ;; `g' asks the server again.
      (setq-local revert-buffer-function
                  (lambda (&rest _)
                    (let ((new (jsonrpc-request conn :moelsp/status nil :timeout 10)))
                      (moelsp--set-status conn new)
                      (moelsp--show-status-buffer conn new))))
      (insert (format "# moelsp for %s\n\n" (abbreviate-file-name (moelsp--root conn))))
      (insert (or (plist-get status :summary)
                  (format "state:        %s%s\n" (plist-get status :state)
                          (if (plist-get status :message) (format "  (%s)" (plist-get status :message)) ""))))
      ;; The texts are above; the JSON has the rest (the fields no text shows).
      (cl-remf fields :summary)
      (cl-remf fields :summaryLine)
      (insert "\n## fields (JSON)\n\n")
      (let ((start (point)))
        (insert (json-serialize fields :null-object nil :false-object :json-false))
        (save-restriction
          (narrow-to-region start (point-max))
          (ignore-errors (json-pretty-print-buffer))))
      (goto-char (point-min)))
    (display-buffer (current-buffer))))

;;;###autoload
(defun moelsp-restart ()
  "Restart this buffer's moelsp server.
To apply new engine settings, or after a crash."
  (interactive)
  (let* ((root (cond (moelsp--connection (moelsp--root moelsp--connection))
                     ((and (derived-mode-p 'moelsp-chat-mode) moelsp-chat--connection)
                      (moelsp--root moelsp-chat--connection))
                     (t (moelsp--buffer-root))))
         (old (gethash root moelsp--connections))
         (bufs (cl-remove-if-not
                (lambda (buf)
                  (with-current-buffer buf
                    (and moelsp-mode moelsp--connection (equal (moelsp--root moelsp--connection) root))))
                (buffer-list))))
    (when (and old (moelsp--live-p old)) (moelsp--shutdown old))
    (let ((conn (moelsp--start root)))
      (dolist (buf bufs)
        (with-current-buffer buf
          (moelsp--clear-suggestion)
          (setq moelsp--connection conn moelsp--inflight nil)
          (moelsp--did-open)))
      (dolist (buf (buffer-list))
        (with-current-buffer buf
          (when (and (derived-mode-p 'moelsp-chat-mode) (eq moelsp-chat--connection old))
            (setq moelsp-chat--connection conn))))
      (message "moelsp: restarted for %s" (abbreviate-file-name root))
      conn)))

;;;###autoload
(defun moelsp-shutdown (&optional all)
  "Stop this buffer's moelsp server; with ALL (a prefix argument), every one."
  (interactive "P")
  (let ((conns (if all (hash-table-values moelsp--connections)
                 (delq nil (list (moelsp--current-connection))))))
    (dolist (conn conns)
      (dolist (buf (moelsp--connection-buffers conn))
        (with-current-buffer buf (moelsp-mode -1)))
      (moelsp--shutdown conn))))

;;;###autoload
(defun moelsp-show-log ()
  "Show the servers' stderr and moelsp.el's own log, *moelsp-log*."
  (interactive)
  (pop-to-buffer (moelsp--log-buffer))
  (goto-char (point-max)))

(defun moelsp-show-events ()
  "Show the JSON-RPC messages exchanged with this buffer's server."
  (interactive)
  (let ((conn (or (moelsp--current-connection) (user-error "moelsp: no server for this buffer"))))
    (pop-to-buffer (jsonrpc-events-buffer conn))))

(provide 'moelsp)
;;; moelsp.el ends here