;;; moelsp-models.el --- Choosing the model of moelsp.el  -*- lexical-binding: t; -*-

;; Author: the moelsp authors

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Part of moelsp.el, which loads it: use (require 'moelsp).
;;
;; `moelsp-choose-model' offers what the server's moelsp/models lists:
;; the embedded default model, the models in the cache, and the
;; downloads its model guide says fit this machine (the plan run on
;; each file's header, read from the Hugging Face hub before anything
;; is downloaded).  A GGUF file name or a reference (owner/repo:QUANT)
;; may be typed instead.  The choice becomes the `model' setting of
;; every running server (workspace/didChangeConfiguration: it reloads
;; in place, or pulls a reference while the embedded model keeps
;; answering, its progress in the echo area) and of servers started
;; later in this session.  To keep it, put it in
;; `moelsp-initialization-options'.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'seq)
(require 'subr-x)

;; From moelsp.el, which requires this file.
(defvar moelsp--connections)
(declare-function moelsp--current-connection "moelsp" (&optional start))
(declare-function moelsp--live-p "moelsp" (conn))

(defvar moelsp-model-override nil
  "The model `moelsp-choose-model' chose in this session, or nil.
\"\" is the embedded default model.  It overrides the `model' of
`moelsp-initialization-options' for servers started later.")

(defun moelsp-models--size (bytes)
  "BYTES as MiB or GiB."
  (if (>= bytes (expt 2 30)) (format "%.1f GiB" (/ bytes (expt 2.0 30)))
    (format "%d MiB" (round (/ bytes (expt 2.0 20))))))

(defun moelsp-models--options (options)
  "OPTIONS, the initializationOptions, with `moelsp-model-override' in them."
  (cond ((null moelsp-model-override) options)
        ((null options) (list :model moelsp-model-override))
        ((keywordp (car options)) (plist-put (copy-sequence options) :model moelsp-model-override))
        (t (cons (cons "model" moelsp-model-override)
                 (cl-remove-if (lambda (e) (member (format "%s" (car e)) '("model"))) options)))))

(defun moelsp-models--suggestion (row)
  "A candidate (LABEL VALUE FITS) for ROW, one of the model guide's rows."
  (let ((ref (plist-get row :ref))
        (fits (eq (plist-get row :fits) t))
        (bytes (or (plist-get row :bytes) 0)))
    (list (cond ((zerop bytes) (format "%s  (not available: %s)" ref (plist-get row :error)))
                (fits (format "download %s  %s  fits: %s, context %d, %s%s  (%s)%s" ref (moelsp-models--size bytes)
                              (plist-get row :where) (plist-get row :context)
                              (moelsp-models--size (plist-get row :plannedBytes))
                              (let ((tps (plist-get row :decodeTokensPerSecond)))
                                (if (and (numberp tps) (> tps 0)) (format ", ~%d tokens/s" (round tps)) ""))
                              (plist-get row :use)
                              (if (eq (plist-get row :cached) t) " [cached]" "")))
                (t (format "download %s  %s  does not fit: %s" ref (moelsp-models--size bytes)
                           (plist-get row :error))))
          ref fits)))

(defun moelsp-models--candidates (models)
  "Candidates (LABEL VALUE FITS) from MODELS, moelsp/models' answer."
  (let* ((current (plist-get (plist-get models :model) :setting))
         (cands (list (list "embedded default model" "" t))))
    (seq-doseq (f (plist-get models :cached))
      (push (if (eq (plist-get f :partial) t)
                (list (format "resume %s  (%s so far)" (plist-get f :label) (moelsp-models--size (plist-get f :bytes)))
                      (plist-get f :ref) t)
              (list (format "cached %s  %s" (plist-get f :label) (moelsp-models--size (plist-get f :bytes)))
                    (plist-get f :path) t))
            cands))
    (seq-doseq (row (plist-get models :suggested))
      (push (moelsp-models--suggestion row) cands))
    (mapcar (lambda (c)
              (if (or (equal (nth 1 c) current)
                      (and (equal (nth 1 c) "") (equal current (plist-get models :embedded))))
                  (cons (concat "* " (car c)) (cdr c))
                c))
            (nreverse cands))))

(defun moelsp-models--read ()
  "Ask the server what there is, then which model; return it."
  (let* ((conn (or (moelsp--current-connection)
                   (user-error "moelsp: no server for this buffer (M-x moelsp-mode starts one)")))
         (models (progn (message "moelsp: asking the hub which models fit this machine...")
                        (jsonrpc-request conn :moelsp/models (list :suggest t) :timeout 120)))
         (cands (moelsp-models--candidates models))
         (prompt (format "moelsp model%s: "
                         (if-let ((err (plist-get models :suggestError)))
                             (format " (the guide cannot reach the hub: %s)" err) "")))
         (answer (completing-read prompt (mapcar #'car cands) nil nil))
         (chosen (assoc answer cands)))
    (cond ((null chosen) (string-trim answer))  ; a file or a reference typed in
          ((or (nth 2 chosen)
               (yes-or-no-p (format "moelsp: %s does not fit this machine.  Use it anyway? " (nth 1 chosen))))
           (nth 1 chosen))
          (t (user-error "moelsp: no model chosen")))))

;;;###autoload
(defun moelsp-choose-model (model)
  "Make MODEL the model of every moelsp server.
Interactively, choose among the embedded model, the cache and the
downloads that fit this machine, or type a GGUF file or owner/repo:QUANT.
\"\" is the embedded default model."
  (interactive (list (moelsp-models--read)))
  (setq moelsp-model-override model)
  (let ((n 0))
    (dolist (conn (hash-table-values moelsp--connections))
      (when (moelsp--live-p conn)
        (jsonrpc-notify conn :workspace/didChangeConfiguration
                        (list :settings (list :moelsp (list :model model))))
        (cl-incf n)))
    (message "moelsp: model %s%s" (if (equal model "") "the embedded default" model)
             (if (zerop n) " (for the next server started)" ""))))

(provide 'moelsp-models)
;;; moelsp-models.el ends here
