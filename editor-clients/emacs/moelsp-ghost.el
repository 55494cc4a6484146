;;; moelsp-ghost.el --- Ghost-text suggestions of moelsp.el  -*- lexical-binding: t; -*-

;; Author: the moelsp authors

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Part of moelsp.el, which loads it: use (require 'moelsp).
;;
;; Inline completions: `moelsp-mode' requests them after a pause in
;; typing (textDocument/inlineCompletion) and shows the answer as an
;; overlay after point, in `moelsp-ghost-face'.  While it shows,
;; `moelsp-suggestion-map' is active: `moelsp-accept',
;; `moelsp-accept-word', `moelsp-accept-line',
;; `moelsp-accept-line-or-end-of-line', `moelsp-next-suggestion',
;; `moelsp-previous-suggestion', `moelsp-dismiss'.  `moelsp-complete'
;; asks explicitly.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'subr-x)

;; From moelsp.el, which requires this file.
(defvar moelsp-mode)
(defvar moelsp-auto-suggest)
(defvar moelsp-idle-delay)
(defvar moelsp--connection)
(defvar moelsp--uri)
(declare-function moelsp--live-p "moelsp" (conn))
(declare-function moelsp--state "moelsp" (conn) t) ; a slot accessor
(declare-function moelsp--request "moelsp") ; a cl-defun: (conn method params &key ...)
(declare-function moelsp--cancel-request "moelsp" (conn id))
(declare-function moelsp--flush "moelsp" ())
(declare-function moelsp--pos-to-lsp "moelsp" (&optional pos))
(declare-function moelsp--lsp-to-pos "moelsp" (position))

(defvar-local moelsp--overlay nil "The overlay showing the suggestion.")
(defvar-local moelsp--suggestion-active nil "Non-nil while a suggestion shows.")
(defvar-local moelsp--items nil
  "The suggestions: a list of plists (:text STRING :item ITEM :accepted N).")
(defvar-local moelsp--index 0 "The index of the suggestion shown in `moelsp--items'.")
(defvar-local moelsp--inflight nil "The id of the suggestion request in flight.")
(defvar-local moelsp--last-tick nil "`buffer-chars-modified-tick' after the last command.")
(defvar-local moelsp--accepting nil "Non-nil while a suggestion is inserted.")
(defvar moelsp--completion-timer nil "The timer requesting a suggestion after a pause.")

(defvar moelsp-suggestion-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "TAB") #'moelsp-accept)
    (define-key map (kbd "<tab>") #'moelsp-accept)
    (define-key map (kbd "M-f") #'moelsp-accept-word)
    (define-key map (kbd "M-<right>") #'moelsp-accept-line)
    (define-key map (kbd "C-e") #'moelsp-accept-line-or-end-of-line)
    (define-key map (kbd "<end>") #'moelsp-accept-line-or-end-of-line)
    (define-key map (kbd "M-n") #'moelsp-next-suggestion)
    (define-key map (kbd "M-p") #'moelsp-previous-suggestion)
    (define-key map (kbd "C-g") #'moelsp-dismiss)
    map)
  "Keys active while a suggestion shows (they take precedence over other maps).")

(defvar moelsp--emulation-alist nil
  "The entry of `emulation-mode-map-alists' for `moelsp-suggestion-map'.")

(defun moelsp--item-text (item)
  "The text of ITEM, an InlineCompletionItem."
  (let ((text (plist-get item :insertText)))
    (if (stringp text) text (plist-get text :value))))

(defun moelsp--usable-items (items pos)
  "The suggestions of ITEMS, InlineCompletionItems, to show at POS."
  (let (out)
    (dolist (item (append items nil))
      (let* ((text (moelsp--item-text item))
             (range (plist-get item :range))
             (start (if range (moelsp--lsp-to-pos (plist-get range :start)) pos))
             (typed (and (< start pos) (buffer-substring-no-properties start pos))))
        (when (and (stringp text) typed)
          (setq text (and (string-prefix-p typed text) (substring text (length typed)))))
        (when (and (stringp text) (not (string-empty-p text))
                   (not (cl-find text out :key (lambda (e) (plist-get e :text)) :test #'equal)))
          (push (list :text text :item item :accepted 0) out))))
    (nreverse out)))

(defun moelsp--ghost-string (text)
  "TEXT as shown at point."
  (let ((s (propertize text 'face 'moelsp-ghost-face)))
    ;; The cursor stays at point, before the suggestion.
    (put-text-property 0 1 'cursor t s)
    s))

(defun moelsp--show (items index)
  "Show suggestion INDEX of ITEMS at point."
  (moelsp--clear-suggestion)
  (setq moelsp--items items
        moelsp--index index)
  (let* ((entry (nth index items))
         (ov (make-overlay (point) (point) nil nil nil)))
    (overlay-put ov 'moelsp t)
    (overlay-put ov 'priority 100)
    ;; Only where the cursor is (the buffer may show in other windows too).
    (when (eq (window-buffer) (current-buffer))
      (overlay-put ov 'window (selected-window)))
    (overlay-put ov 'after-string (moelsp--ghost-string (plist-get entry :text)))
    (setq moelsp--overlay ov
          moelsp--suggestion-active t
          moelsp--last-tick (buffer-chars-modified-tick))
    (when (moelsp--live-p moelsp--connection)
      (jsonrpc-notify moelsp--connection :moelsp/didShowCompletion
                      (list :item (plist-get entry :item))))))

(defun moelsp--clear-suggestion ()
  "Remove the suggestion, if any."
  (when moelsp--overlay
    (delete-overlay moelsp--overlay))
  (setq moelsp--overlay nil
        moelsp--suggestion-active nil
        moelsp--items nil
        moelsp--index 0))

(defun moelsp-suggestion ()
  "The text of the suggestion shown at point, or nil."
  (and moelsp--overlay (plist-get (nth moelsp--index moelsp--items) :text)))

(defun moelsp--ready-p (conn)
  "Non-nil if CONN's model is loaded."
  (and (moelsp--live-p conn) (member (moelsp--state conn) '("ready" "busy"))))

(defun moelsp--cancel-inflight ()
  "Cancel this buffer's suggestion request in flight."
  (when moelsp--inflight
    (moelsp--cancel-request moelsp--connection moelsp--inflight)
    (setq moelsp--inflight nil)))

(defun moelsp--request-suggestion (invoked)
  "Request suggestions at point.
INVOKED non-nil: the user asked (and gets alternatives)."
  (moelsp--cancel-inflight)
  (let ((conn moelsp--connection))
    (cond
     ((not (moelsp--live-p conn))
      (when invoked (user-error "moelsp: the server is not running (M-x moelsp-restart)")))
     ((not (moelsp--ready-p conn))
      (when invoked (message "moelsp: the model is not ready (%s)" (moelsp--state conn))))
     (t
      (moelsp--flush)
      (let* ((buf (current-buffer))
             (tick (buffer-chars-modified-tick))
             (pt (point))
             (id nil))
        (setq id (moelsp--request
                  conn :textDocument/inlineCompletion
                  (list :textDocument (list :uri moelsp--uri)
                        :position (moelsp--pos-to-lsp pt)
                        :context (list :triggerKind (if invoked 1 2)))
                  :success (lambda (result)
                             (moelsp--on-suggestions buf id tick pt result invoked))
                  :error (lambda (err)
                           (when (buffer-live-p buf)
                             (with-current-buffer buf
                               (when (eql moelsp--inflight id)
                                 (setq moelsp--inflight nil)
                                 (when invoked
                                   (message "moelsp: %s" (plist-get err :message))))))))
              moelsp--inflight id))))))

(defun moelsp--on-suggestions (buf id tick pt result invoked)
  "Show RESULT, the answer to request ID made in BUF at tick TICK and point PT.
INVOKED non-nil: the user asked for it."
  (when (buffer-live-p buf)
    (with-current-buffer buf
      (when (eql moelsp--inflight id)
        (setq moelsp--inflight nil)
        (when (and moelsp-mode (= tick (buffer-chars-modified-tick)) (= pt (point)))
          (let ((items (moelsp--usable-items (if (vectorp result) result (plist-get result :items)) pt)))
            (cond (items (moelsp--show items 0))
                  (invoked (message "moelsp: no suggestion here")))))))))

(defun moelsp--cancel-timer ()
  "Cancel the pending request of a suggestion."
  (when (timerp moelsp--completion-timer) (cancel-timer moelsp--completion-timer))
  (setq moelsp--completion-timer nil))

(defun moelsp--schedule ()
  "Request a suggestion after `moelsp-idle-delay' seconds without commands."
  (moelsp--cancel-timer)
  (setq moelsp--completion-timer
        (run-with-timer moelsp-idle-delay nil #'moelsp--on-timer
                        (current-buffer) (buffer-chars-modified-tick) (point))))

(defun moelsp--on-timer (buf tick pt)
  "Request a suggestion in BUF if it is still at TICK with point at PT."
  (setq moelsp--completion-timer nil)
  (when (buffer-live-p buf)
    (with-current-buffer buf
      (when (and moelsp-mode moelsp-auto-suggest (not moelsp--overlay)
                 (not buffer-read-only) (not executing-kbd-macro)
                 (= tick (buffer-chars-modified-tick)) (= pt (point)))
        (moelsp--request-suggestion nil)))))

(defun moelsp--type-through ()
  "Keep the rest of the suggestion if the last command typed its start.
Return non-nil if it did."
  (let* ((ov moelsp--overlay)
         (start (overlay-start ov))
         (entry (nth moelsp--index moelsp--items))
         (text (plist-get entry :text)))
    (when (and (> (point) start) (< (- (point) start) (length text)))
      (let ((typed (buffer-substring-no-properties start (point))))
        (when (string-prefix-p typed text)
          (moelsp--keep-rest entry (length typed))
          t)))))

(defun moelsp--keep-rest (entry n)
  "Show ENTRY's text after its first N characters, now in the buffer, at point."
  (let ((rest (substring (plist-get entry :text) n))
        (accepted (+ (plist-get entry :accepted) n)))
    (moelsp--show-entry (list :text rest :item (plist-get entry :item) :accepted accepted))))

(defun moelsp--show-entry (entry)
  "Show ENTRY alone at point, without telemetry."
  (move-overlay moelsp--overlay (point) (point))
  (overlay-put moelsp--overlay 'after-string (moelsp--ghost-string (plist-get entry :text)))
  (setq moelsp--items (list entry)
        moelsp--index 0
        moelsp--last-tick (buffer-chars-modified-tick)))

(defun moelsp--post-command ()
  "After each command: keep, shrink or dismiss the suggestion; schedule the next."
  (let* ((tick (buffer-chars-modified-tick))
         (changed (not (eql tick moelsp--last-tick))))
    (setq moelsp--last-tick tick)
    (cond
     ((null moelsp--overlay))
     ((and (not changed) (= (point) (overlay-start moelsp--overlay))))
     ((and changed (moelsp--type-through)) (setq changed nil))
     (t (moelsp--clear-suggestion)))
    (cond
     (changed
      (moelsp--cancel-inflight)
      (when (and moelsp-auto-suggest (not moelsp--overlay)) (moelsp--schedule)))
     ((and moelsp--inflight (not moelsp--overlay))
      ;; Point moved: the answer would be for another place.
      (moelsp--cancel-inflight)))))

(defun moelsp--fall-through ()
  "Run what the keys of this command run without `moelsp-suggestion-map'."
  (let* ((keys (this-command-keys-vector))
         (cmd (and (> (length keys) 0)
                   (let ((moelsp--suggestion-active nil)) (key-binding keys t)))))
    (when (and (commandp cmd) (not (memq cmd '(moelsp-accept moelsp-accept-word moelsp-accept-line
                                                             moelsp-accept-line-or-end-of-line))))
      (setq this-command cmd)
      (call-interactively cmd))))

(defun moelsp--accept-chars (n)
  "Insert the first N characters of the suggestion."
  (let* ((entry (nth moelsp--index moelsp--items))
         (text (plist-get entry :text))
         (n (min n (length text)))
         (item (plist-get entry :item)))
    (goto-char (overlay-start moelsp--overlay))
    (let ((moelsp--accepting t))
      (insert (substring text 0 n)))
    (if (< n (length text))
        (progn
          (moelsp--keep-rest entry n)
          (when (moelsp--live-p moelsp--connection)
            (jsonrpc-notify moelsp--connection :textDocument/didPartiallyAcceptCompletion
                            (list :item item
                                  :acceptedLength (+ (plist-get entry :accepted) n)))))
      (moelsp--clear-suggestion)
      (when (moelsp--live-p moelsp--connection)
        (let ((command (plist-get item :command)))
          (moelsp--request moelsp--connection :workspace/executeCommand
                           (if (plist-get command :arguments)
                               (list :command (plist-get command :command)
                                     :arguments (plist-get command :arguments))
                             (list :command (or (plist-get command :command) "moelsp.accepted")))))))))

(defun moelsp--word-length (text)
  "Return how far \\[forward-word] moves in TEXT, with this buffer's syntax."
  (let ((table (syntax-table)))
    (with-temp-buffer
      (set-syntax-table table)
      (insert text)
      (goto-char (point-min))
      (if (forward-word 1) (1- (point)) (length text)))))

(defun moelsp--line-length (text)
  "The length of TEXT's first line (its leading newlines and the line after them)."
  (let ((start (if (string-match "\\`\n+" text) (match-end 0) 0)))
    (or (string-match "\n" text start) (length text))))

(defun moelsp-accept ()
  "Insert the suggestion shown at point; without one, run the key's usual command."
  (interactive)
  (if moelsp--overlay
      (moelsp--accept-chars most-positive-fixnum)
    (moelsp--fall-through)))

(defun moelsp-accept-word ()
  "Insert the suggestion's next word (as \\[forward-word] counts words)."
  (interactive)
  (if moelsp--overlay
      (moelsp--accept-chars (moelsp--word-length (moelsp-suggestion)))
    (moelsp--fall-through)))

(defun moelsp-accept-line ()
  "Insert the suggestion up to the end of its line."
  (interactive)
  (if moelsp--overlay
      (moelsp--accept-chars (moelsp--line-length (moelsp-suggestion)))
    (moelsp--fall-through)))

(defun moelsp-accept-line-or-end-of-line ()
  "At the end of a line, insert the suggestion's line; elsewhere move as usual.
\\[move-end-of-line] would not move at the end of a line, so the key
can accept there."
  (interactive)
  (if (and moelsp--overlay (eolp))
      (moelsp-accept-line)
    (moelsp--clear-suggestion)
    (moelsp--fall-through)))

(defun moelsp-dismiss ()
  "Remove the suggestion shown at point."
  (interactive)
  (moelsp--cancel-timer)
  (moelsp--cancel-inflight)
  (moelsp--clear-suggestion))

(defun moelsp-next-suggestion (&optional n)
  "Show the next alternative suggestion (the N-th next, N a prefix argument)."
  (interactive "p")
  (when (and moelsp--overlay (> (length moelsp--items) 1))
    (let ((items moelsp--items)
          (index (mod (+ moelsp--index (or n 1)) (length moelsp--items))))
      (moelsp--show items index)
      (message "moelsp: suggestion %d of %d" (1+ index) (length items)))))

(defun moelsp-previous-suggestion (&optional n)
  "Show the previous alternative suggestion (the N-th previous one)."
  (interactive "p")
  (moelsp-next-suggestion (- (or n 1))))

(defun moelsp-complete ()
  "Ask for suggestions at point now (up to three alternatives, \\[moelsp-next-suggestion] cycles)."
  (interactive)
  (unless moelsp-mode (user-error "moelsp: enable `moelsp-mode' first"))
  (moelsp--cancel-timer)
  (moelsp--clear-suggestion)
  (moelsp--request-suggestion t))

(provide 'moelsp-ghost)
;;; moelsp-ghost.el ends here
