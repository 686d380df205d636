package service

// AddScript registers one more script on s, loaded by LoadScripts like the
// built-in ones. Tests use it to prove that a script Redis rejects stops
// start-up with an error naming it.
func AddScript(s *Service, name, src string) {
	s.scripts = append(s.scripts[:len(s.scripts):len(s.scripts)], newScript(name, src))
}
