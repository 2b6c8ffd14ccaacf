package sqlite

// SetAfterPrepare sets a function that runs between the preparation of a
// PutEntries and its transaction.
func (s *Store) SetAfterPrepare(f func()) { s.afterPrepare = f }
