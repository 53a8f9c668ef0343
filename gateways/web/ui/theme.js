// The theme the user chose (light, dark, or the system's), applied before the page is drawn.
window.applyTheme = () => {
  const theme = localStorage.getItem("theme");
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
};
window.applyTheme();
