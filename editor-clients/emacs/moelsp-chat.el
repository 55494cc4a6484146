;;; moelsp-chat.el --- The chat buffer of moelsp.el: chat, explain, fix, document  -*- lexical-binding: t; -*-

;; Author: the moelsp authors

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Part of moelsp.el, which loads it: use (require 'moelsp).
;;
;; `moelsp-chat' asks a question (moelsp/chat) and streams the answer,
;; sent as $/progress with a partial-result token, into the
;; *moelsp-chat* buffer (`moelsp-chat-mode'), which keeps the
;; conversation.  `moelsp-explain', `moelsp-fix' and `moelsp-document'
;; run the server's commands (workspace/executeCommand; moelsp/chat
;; with the code for a buffer the server does not have open) on the
;; region or the function at point, streaming into the same buffer.
;; Their questions are worded by the server, not here.

;;; Code:

(require 'cl-lib)
(require 'subr-x)

;; From moelsp.el, which requires this file.
(defvar moelsp-mode)
(defvar moelsp-chat-buffer-name)
(defvar moelsp-chat-history-chars)
(defvar moelsp--connection)
(defvar moelsp--uri)
(declare-function moelsp--current-connection "moelsp" (&optional start))
(declare-function moelsp--progress-handlers "moelsp" (conn) t) ; a slot accessor
(declare-function moelsp--request "moelsp") ; a cl-defun: (conn method params &key ...)
(declare-function moelsp--cancel-request "moelsp" (conn id))
(declare-function moelsp--flush "moelsp" ())
(declare-function moelsp--pos-to-lsp "moelsp" (&optional pos))
(declare-function moelsp--language-id "moelsp" ())

(defvar-local moelsp-chat--connection nil "The chat buffer's connection.")
(defvar-local moelsp-chat--messages nil "The conversation, a list of (:role :content) plists, oldest first.")
(defvar-local moelsp-chat--pending nil "The answer in flight: (CONNECTION . ID), or nil.")
(defvar-local moelsp-chat--marker nil "Where the answer's next text goes.")
(defvar-local moelsp-chat--answer-start nil "Where the answer in flight starts.")
(defvar moelsp--chat-counter 0 "The number of the last progress token.")

(defvar moelsp-chat-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'moelsp-chat)
    (define-key map (kbd "a") #'moelsp-chat)
    (define-key map (kbd "C-c C-k") #'moelsp-chat-cancel)
    (define-key map (kbd "N") #'moelsp-chat-new)
    map)
  "Keys of the chat buffer.")

(define-derived-mode moelsp-chat-mode special-mode "moelsp-chat"
  "The conversation with moelsp.
\\{moelsp-chat-mode-map}"
  (setq-local truncate-lines nil)
  (visual-line-mode 1))

(defun moelsp--chat-buffer ()
  "The chat buffer, created if needed."
  (let ((buf (get-buffer-create moelsp-chat-buffer-name)))
    (with-current-buffer buf
      (unless (derived-mode-p 'moelsp-chat-mode) (moelsp-chat-mode)))
    buf))

(defun moelsp--chat-insert (text &optional face)
  "Insert TEXT at the end of the chat buffer (the current buffer), in FACE."
  (let ((inhibit-read-only t))
    (save-excursion
      (goto-char (point-max))
      (insert (if face (propertize text 'face face 'font-lock-face face) text)))))

(defun moelsp--chat-stream (buf text)
  "Append TEXT, a piece of the answer, to the chat buffer BUF."
  (when (and (buffer-live-p buf) (stringp text) (not (string-empty-p text)))
    (with-current-buffer buf
      (when (markerp moelsp-chat--marker)
        (let ((inhibit-read-only t)
              (follow (cl-remove-if-not (lambda (w) (>= (window-point w) moelsp-chat--marker))
                                        (get-buffer-window-list buf nil t))))
          (save-excursion
            (goto-char moelsp-chat--marker)
            (insert text))
          (dolist (w follow) (set-window-point w moelsp-chat--marker)))))))

(defun moelsp--chat-history ()
  "The earlier messages to send, newest kept, within `moelsp-chat-history-chars'."
  (let ((budget moelsp-chat-history-chars) kept)
    (cl-loop for m in (reverse moelsp-chat--messages)
             for len = (length (plist-get m :content))
             while (<= len budget)
             do (setq budget (- budget len)) (push m kept))
    ;; Start with the user's turn.
    (while (and kept (not (equal (plist-get (car kept) :role) "user"))) (pop kept))
    kept))

(cl-defun moelsp--chat-send (conn method params token &key title question)
  "Send the chat request METHOD with PARAMS on CONN, streaming on TOKEN.
TITLE is the user's turn as shown; QUESTION is what the conversation
keeps of it, unless the result carries the turn as the server asked
it (explain, fix, document: their `question')."
  (let ((buf (moelsp--chat-buffer)))
    (with-current-buffer buf
      (when moelsp-chat--pending
        (user-error "moelsp: still answering (C-c C-k in the chat buffer cancels)"))
      (setq moelsp-chat--connection conn)
      (unless (= (point-min) (point-max)) (moelsp--chat-insert "\n"))
      (moelsp--chat-insert "## You\n" 'moelsp-chat-heading-face)
      (moelsp--chat-insert (concat title "\n\n"))
      (moelsp--chat-insert "## moelsp\n" 'moelsp-chat-heading-face)
      (setq moelsp-chat--answer-start (copy-marker (point-max))
            moelsp-chat--marker (copy-marker (point-max) t))
      (puthash token (lambda (value)
                       (moelsp--chat-stream buf (or (plist-get value :text)
                                                    (and (equal (plist-get value :kind) "report")
                                                         (plist-get value :message)))))
               (moelsp--progress-handlers conn))
      (let ((id (moelsp--request
                 conn method params
                 :timeout nil
                 :success (lambda (result) (moelsp--chat-done buf conn token question result nil))
                 :error (lambda (err) (moelsp--chat-done buf conn token question nil err)))))
        (setq moelsp-chat--pending (cons conn id))))
    (let ((win (display-buffer buf)))
      (when win (set-window-point win (with-current-buffer buf (point-max)))))
    buf))

(defun moelsp--chat-done (buf conn token question result err)
  "Finish the answer in BUF on CONN (progress TOKEN) to QUESTION: RESULT or ERR."
  (remhash token (moelsp--progress-handlers conn))
  (when (buffer-live-p buf)
    (with-current-buffer buf
      (setq moelsp-chat--pending nil)
      (let ((inhibit-read-only t)
            (text (plist-get result :text)))
        (when (and result (stringp text)
                   (not (equal text (buffer-substring-no-properties moelsp-chat--answer-start
                                                                    moelsp-chat--marker))))
          ;; The streamed pieces and the answer differ: the answer wins.
          (save-excursion
            (delete-region moelsp-chat--answer-start moelsp-chat--marker)
            (goto-char moelsp-chat--answer-start)
            (insert text)))
        (moelsp--chat-insert
         (if result
             (let ((tps (plist-get result :tokensPerSecond)))
               (format "\n\n[%s%s]\n" (or (plist-get result :finishReason) "done")
                       (if (and (numberp tps) (> tps 0)) (format ", %.1f tokens/s" tps) "")))
           (format "\n\n[%s]\n" (if (eql (plist-get err :code) -32800) "cancelled"
                                  (concat "error: " (or (plist-get err :message) "unknown")))))
         'moelsp-chat-footer-face)
        ;; A command's question is worded by the server: its result says
        ;; what was asked, which the follow-ups must see.
        (let ((asked (or (plist-get result :question) question)))
          (when (and result (stringp asked))
            (setq moelsp-chat--messages
                  (append moelsp-chat--messages
                          (list (list :role "user" :content asked)
                                (list :role "assistant" :content (or text "")))))))
        (set-marker moelsp-chat--marker nil)
        (setq moelsp-chat--marker nil))
      (when result (run-hook-with-args 'moelsp-chat-answer-functions (or (plist-get result :text) ""))))))

(defun moelsp--region-range (beg end)
  "The LSP range of BEG..END."
  (list :start (moelsp--pos-to-lsp beg) :end (moelsp--pos-to-lsp end)))

(defun moelsp--code-block (beg end)
  "The text of BEG..END as a Markdown code block."
  (format "```%s\n%s\n```" (moelsp--language-id) (buffer-substring-no-properties beg end)))

(defun moelsp--where (beg end)
  "A short description of BEG..END: buffer and lines."
  (format "%s, lines %d-%d" (buffer-name) (line-number-at-pos beg t)
          (line-number-at-pos (max beg (1- end)) t)))

;; The autoloads load moelsp.el, which loads this file after what it needs.
;;;###autoload (autoload 'moelsp-chat "moelsp" "Ask moelsp QUESTION; the answer streams into the *moelsp-chat* buffer." t)
(defun moelsp-chat (question &optional beg end new)
  "Ask moelsp QUESTION; the answer streams into the *moelsp-chat* buffer.
With an active region (BEG..END), the region goes along as context.
The chat buffer keeps the conversation: the next question follows
it.  NEW (a prefix argument) starts a new conversation."
  (interactive
   (let ((region (use-region-p)))
     (list (read-string (if region "Ask moelsp about the region: " "Ask moelsp: "))
           (and region (region-beginning)) (and region (region-end))
           current-prefix-arg)))
  (when (string-empty-p (string-trim question)) (user-error "moelsp: empty question"))
  (let* ((conn (moelsp--current-connection t))
         (token (format "moelsp-chat-%d" (cl-incf moelsp--chat-counter)))
         (open (and beg end moelsp-mode moelsp--uri (eq moelsp--connection conn)))
         (content (if (and beg end (not open))
                      (concat "Context:\n" (moelsp--code-block beg end) "\n\n" question)
                    question))
         (title (if (and beg end) (format "%s\n(%s)" question (moelsp--where beg end)) question))
         (history (with-current-buffer (moelsp--chat-buffer)
                    (when new (setq moelsp-chat--messages nil))
                    (unless (eq moelsp-chat--connection conn) (setq moelsp-chat--messages nil))
                    (moelsp--chat-history)))
         (params (list :messages (vconcat history (list (list :role "user" :content content)))
                       :partialResultToken token)))
    (when open
      (moelsp--flush)
      (setq params (append params (list :uri moelsp--uri :range (moelsp--region-range beg end)))))
    (moelsp--chat-send conn :moelsp/chat params token :title title :question question)))

(defun moelsp-chat-cancel ()
  "Stop the answer being written."
  (interactive)
  (with-current-buffer (moelsp--chat-buffer)
    (if moelsp-chat--pending
        (moelsp--cancel-request (car moelsp-chat--pending) (cdr moelsp-chat--pending))
      (message "moelsp: no answer in progress"))))

(defun moelsp-chat-new ()
  "Start a new conversation (the chat buffer keeps the old text)."
  (interactive)
  (with-current-buffer (moelsp--chat-buffer)
    (setq moelsp-chat--messages nil)
    (moelsp--chat-insert "\n---- new conversation ----\n" 'moelsp-chat-footer-face))
  (message "moelsp: new conversation"))

(defun moelsp--region-or-defun ()
  "The region when active, else the function at point, else the buffer: (BEG END)."
  (cond ((use-region-p) (list (region-beginning) (region-end)))
        ((bounds-of-thing-at-point 'defun)
         (let ((b (bounds-of-thing-at-point 'defun))) (list (car b) (cdr b))))
        (t (list (point-min) (point-max)))))

(defun moelsp--code-command (kind label beg end)
  "Ask the server's command KIND (\"explain\", \"fix\", \"document\") about BEG..END.
LABEL heads the turn in the chat buffer.  The question itself is the
server's: the result's `question' (its wording and the code) is what
the conversation keeps for the follow-ups."
  (let* ((conn (moelsp--current-connection t))
         (token (format "moelsp-chat-%d" (cl-incf moelsp--chat-counter)))
         (title (format "%s\n(%s)" label (moelsp--where beg end))))
    (with-current-buffer (moelsp--chat-buffer)
      (unless (eq moelsp-chat--connection conn) (setq moelsp-chat--messages nil)))
    (if (and moelsp-mode moelsp--uri (eq moelsp--connection conn))
        (progn
          (moelsp--flush)
          (moelsp--chat-send conn :workspace/executeCommand
                             (list :command (concat "moelsp." kind)
                                   :arguments (vector (list :uri moelsp--uri
                                                            :range (moelsp--region-range beg end)))
                                   :workDoneToken token)
                             token :title title))
      ;; The document is not open on the server: the same question through
      ;; moelsp/chat, with the code itself.
      (moelsp--chat-send conn :moelsp/chat
                         (list :kind kind
                               :code (buffer-substring-no-properties beg end)
                               :language (moelsp--language-id)
                               :partialResultToken token)
                         token :title title))))

;;;###autoload (autoload 'moelsp-explain "moelsp" "Ask moelsp to explain the region BEG..END (or the function at point)." t)
(defun moelsp-explain (beg end)
  "Ask moelsp to explain the region BEG..END (or the function at point)."
  (interactive (moelsp--region-or-defun))
  (moelsp--code-command "explain" "Explain" beg end))

;;;###autoload (autoload 'moelsp-fix "moelsp" "Ask moelsp to find the bugs in BEG..END (or the function at point) and fix them." t)
(defun moelsp-fix (beg end)
  "Ask moelsp to find the bugs in BEG..END (or the function at point) and fix them."
  (interactive (moelsp--region-or-defun))
  (moelsp--code-command "fix" "Fix" beg end))

;;;###autoload (autoload 'moelsp-document "moelsp" "Ask moelsp to write documentation comments for BEG..END." t)
(defun moelsp-document (beg end)
  "Ask moelsp to write documentation comments for BEG..END.
Interactively: the region, or the function at point."
  (interactive (moelsp--region-or-defun))
  (moelsp--code-command "document" "Document" beg end))

(provide 'moelsp-chat)
;;; moelsp-chat.el ends here
